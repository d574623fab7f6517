package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites the text between added tokens before pre-tokenization.
type normalizer interface {
	normalize(s string) (string, error)
}

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

// parseNormalizer builds the normalizer described by raw (nil for null).
func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	c, err := parseComponent(raw, "normalizer")
	if err != nil {
		return nil, err
	}
	switch c.Type {
	case "Sequence":
		var seq normSequence
		for i, sub := range c.Normalizers {
			n, err := parseNormalizer(sub)
			if err != nil {
				return nil, fmt.Errorf("normalizer Sequence[%d]: %w", i, err)
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		return seq, nil
	case "NFC":
		return unicodeNorm{norm.NFC}, nil
	case "NFD":
		return unicodeNorm{norm.NFD}, nil
	case "NFKC":
		return unicodeNorm{norm.NFKC}, nil
	case "NFKD":
		return unicodeNorm{norm.NFKD}, nil
	case "Lowercase":
		return lowercase{}, nil
	case "StripAccents":
		return stripAccents{}, nil
	case "Strip":
		return strip{left: boolOr(c.StripLeft, true), right: boolOr(c.StripRight, true)}, nil
	case "Prepend":
		return prepend{c.Prepend}, nil
	case "Append":
		return appendNorm{c.Append}, nil
	case "Replace":
		m, err := c.Pattern.compile()
		if err != nil {
			return nil, fmt.Errorf("normalizer Replace: %w", err)
		}
		return replace{m, c.Content}, nil
	case "ByteLevel":
		return byteLevelNorm{}, nil
	}
	return nil, fmt.Errorf("unsupported normalizer type %q", c.Type)
}

func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

type normSequence []normalizer

func (seq normSequence) normalize(s string) (string, error) {
	var err error
	for _, n := range seq {
		if s, err = n.normalize(s); err != nil {
			return "", err
		}
	}
	return s, nil
}

// unicodeNorm applies a Unicode normalization form.
type unicodeNorm struct{ form norm.Form }

func (u unicodeNorm) normalize(s string) (string, error) {
	return normalizeForm(u.form, s), nil
}

// lowercase maps each rune to its full lowercase (Rust char::to_lowercase).
type lowercase struct{}

func (lowercase) normalize(s string) (string, error) {
	var sb strings.Builder
	sb.Grow(len(s))
	for _, r := range s {
		if r == 'İ' { // the one unconditional multi-rune lowercase mapping
			sb.WriteString("i\u0307")
			continue
		}
		sb.WriteRune(unicode.ToLower(r))
	}
	return sb.String(), nil
}

// stripAccents drops combining marks (Mn, Mc, Me).
type stripAccents struct{}

func (stripAccents) normalize(s string) (string, error) {
	return strings.Map(func(r rune) rune {
		if unicode.Is(unicode.M, r) {
			return -1
		}
		return r
	}, s), nil
}

// strip removes leading and/or trailing Unicode White_Space.
type strip struct{ left, right bool }

func (st strip) normalize(s string) (string, error) {
	if st.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if st.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s, nil
}

// prepend adds a prefix to non-empty text.
type prepend struct{ prefix string }

func (p prepend) normalize(s string) (string, error) {
	if s == "" {
		return s, nil
	}
	return p.prefix + s, nil
}

// appendNorm adds a suffix to non-empty text.
type appendNorm struct{ suffix string }

func (a appendNorm) normalize(s string) (string, error) {
	if s == "" {
		return s, nil
	}
	return s + a.suffix, nil
}

// replace substitutes every match of a pattern.
type replace struct {
	m       matcher
	content string
}

func (r replace) normalize(s string) (string, error) {
	spans, err := r.m.findMatches(s, nil)
	if err != nil {
		return "", fmt.Errorf("normalizer Replace: %w", err)
	}
	var sb strings.Builder
	sb.Grow(len(s))
	for _, sp := range spans {
		if sp.match {
			sb.WriteString(r.content)
		} else {
			sb.WriteString(s[sp.start:sp.end])
		}
	}
	return sb.String(), nil
}

// byteLevelNorm maps UTF-8 bytes to the byte-level alphabet.
type byteLevelNorm struct{}

func (byteLevelNorm) normalize(s string) (string, error) {
	return byteLevelString(s), nil
}
