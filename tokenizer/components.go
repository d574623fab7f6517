package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// This file parses the small JSON components (normalizers, pre-tokenizers,
// post-processors, decoders) that share field names.

// component is the union of the fields of every normalizer, pre-tokenizer,
// post-processor and decoder this package understands; `type` says which.
type component struct {
	Type string `json:"type"`

	Normalizers   []json.RawMessage `json:"normalizers"`
	PreTokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	Decoders      []json.RawMessage `json:"decoders"`

	Pattern  *patternSpec `json:"pattern"`
	Content  string       `json:"content"`
	Prepend  string       `json:"prepend"`
	Append   string       `json:"append"`
	Behavior string       `json:"behavior"`
	Invert   bool         `json:"invert"`

	StripLeft  *bool `json:"strip_left"`
	StripRight *bool `json:"strip_right"`
	Left       *bool `json:"left"`
	Right      *bool `json:"right"`

	AddPrefixSpace *bool `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`

	Replacement      string `json:"replacement"`
	PrependScheme    string `json:"prepend_scheme"`
	Split            *bool  `json:"split"`
	IndividualDigits bool   `json:"individual_digits"`
	Delimiter        string `json:"delimiter"`

	CleanText          *bool `json:"clean_text"`
	HandleChineseChars *bool `json:"handle_chinese_chars"`
	StripAccents       *bool `json:"strip_accents"`
	Lowercase          *bool `json:"lowercase"`

	Start int `json:"start"`
	Stop  int `json:"stop"`

	Prefix  *string `json:"prefix"`
	Suffix  *string `json:"suffix"`
	Cleanup *bool   `json:"cleanup"`

	Single        []templatePiece            `json:"single"`
	SpecialTokens map[string]templateSpecial `json:"special_tokens"`
	Sep           *tokenAndID                `json:"sep"`
	Cls           *tokenAndID                `json:"cls"`
}

// patternSpec is `{"String": "..."}` or `{"Regex": "..."}`.
type patternSpec struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// compile returns a matcher for the pattern: a literal string is escaped
// into a regex, as the reference does.
func (p *patternSpec) compile() (matcher, error) {
	switch {
	case p == nil:
		return nil, fmt.Errorf("missing pattern")
	case p.Regex != nil:
		re, err := compileRegex(*p.Regex)
		if err != nil {
			return nil, err
		}
		return regexMatcher{re}, nil
	case p.String != nil:
		return literalMatcher{*p.String}, nil
	}
	return nil, fmt.Errorf("pattern needs String or Regex")
}

// literalMatcher finds non-overlapping occurrences of a fixed string.
type literalMatcher struct{ lit string }

// replaceAll is strings.ReplaceAll: the same non-overlapping, left to right
// matches as findMatches (empty patterns replace nothing).
func (m literalMatcher) replaceAll(s, with string) string {
	if m.lit == "" {
		return s
	}
	return strings.ReplaceAll(s, m.lit, with)
}

func (m literalMatcher) findMatches(s string, out []span) ([]span, error) {
	if s == "" || m.lit == "" {
		return append(out, span{0, len(s), false}), nil
	}
	prev := 0
	for {
		i := strings.Index(s[prev:], m.lit)
		if i < 0 {
			break
		}
		start := prev + i
		if start != prev {
			out = append(out, span{prev, start, false})
		}
		out = append(out, span{start, start + len(m.lit), true})
		prev = start + len(m.lit)
	}
	if prev != len(s) {
		out = append(out, span{prev, len(s), false})
	}
	return out, nil
}

func parseComponent(raw json.RawMessage, what string) (*component, error) {
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return &c, nil
}

func isNull(raw json.RawMessage) bool {
	s := bytes.TrimSpace(raw)
	return len(s) == 0 || string(s) == "null"
}

func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}
