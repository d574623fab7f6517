package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// piece is one pre-token on its way to the model.
type piece struct {
	s string
	// atStart is true when the piece begins at offset 0 of the original
	// input (Metaspace's prepend_scheme "first" looks at it).
	atStart bool
	// raw is set by the ByteLevel pre-tokenizer: s holds the raw bytes and
	// the piece's text is really byteLevelString(s). Mapping is deferred
	// so that the model can work on the bytes directly.
	raw bool
}

// materialize applies deferred byte-level mapping before a pre-tokenizer
// that needs the real text.
func materialize(in []piece) {
	for i := range in {
		if in[i].raw {
			in[i].s, in[i].raw = byteLevelString(in[i].s), false
		}
	}
}

// preTokenizer splits and rewrites pieces.
type preTokenizer interface {
	preTokenize(in []piece) ([]piece, error)
}

// gpt2Pattern is the regex ByteLevel splits with when use_regex is set.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

func parsePreTokenizer(raw json.RawMessage) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	c, err := parseComponent(raw, "pre_tokenizer")
	if err != nil {
		return nil, err
	}
	switch c.Type {
	case "Sequence":
		var seq preSequence
		for i, sub := range c.PreTokenizers {
			p, err := parsePreTokenizer(sub)
			if err != nil {
				return nil, fmt.Errorf("pre_tokenizer Sequence[%d]: %w", i, err)
			}
			if p != nil {
				seq = append(seq, p)
			}
		}
		return seq, nil
	case "Split":
		return parseSplit(c)
	case "ByteLevel":
		return newByteLevelPre(boolOr(c.AddPrefixSpace, true), boolOr(c.UseRegex, true))
	case "Metaspace":
		return parseMetaspace(c)
	case "Digits":
		b := behaviorContiguous
		if c.IndividualDigits {
			b = behaviorIsolated
		}
		return funcSplit{pred: isNumeric, behavior: b}, nil
	case "Whitespace":
		return whitespacePre{}, nil
	case "WhitespaceSplit":
		return funcSplit{pred: unicode.IsSpace, behavior: behaviorRemoved}, nil
	case "Punctuation":
		b, err := behaviorOr(c.Behavior, behaviorIsolated)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Punctuation: %w", err)
		}
		return funcSplit{pred: isPunctuation, behavior: b}, nil
	case "BertPreTokenizer":
		return preSequence{
			funcSplit{pred: unicode.IsSpace, behavior: behaviorRemoved},
			funcSplit{pred: isBertPunctuation, behavior: behaviorIsolated},
		}, nil
	case "UnicodeScripts":
		return unicodeScripts{}, nil
	case "CharDelimiterSplit":
		d, size := utf8.DecodeRuneInString(c.Delimiter)
		if size == 0 || size != len(c.Delimiter) {
			return nil, fmt.Errorf("pre_tokenizer CharDelimiterSplit: delimiter %q is not one character", c.Delimiter)
		}
		return funcSplit{pred: func(r rune) bool { return r == d }, behavior: behaviorRemoved}, nil
	}
	return nil, fmt.Errorf("unsupported pre_tokenizer type %q", c.Type)
}

func behaviorOr(name string, def behavior) (behavior, error) {
	if name == "" {
		return def, nil
	}
	return parseBehavior(name)
}

type preSequence []preTokenizer

func (seq preSequence) preTokenize(in []piece) ([]piece, error) {
	var err error
	for _, p := range seq {
		if in, err = p.preTokenize(in); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// splitPieces cuts every piece by m and b, dropping empty pieces.
func splitPieces(in []piece, m matcher, b behavior, invert bool) ([]piece, error) {
	materialize(in)
	out := make([]piece, 0, len(in)*2)
	var spans []span
	for _, p := range in {
		var err error
		spans, err = m.findMatches(p.s, spans[:0])
		if err != nil {
			return nil, err
		}
		if invert {
			spans = invertSpans(spans)
		}
		for _, sp := range applyBehavior(spans, b) {
			if sp.end > sp.start {
				out = append(out, piece{s: p.s[sp.start:sp.end], atStart: p.atStart && sp.start == 0})
			}
		}
	}
	return out, nil
}

// split is the Split pre-tokenizer.
type split struct {
	m        matcher
	behavior behavior
	invert   bool
}

func parseSplit(c *component) (preTokenizer, error) {
	m, err := c.Pattern.compile()
	if err != nil {
		return nil, fmt.Errorf("pre_tokenizer Split: %w", err)
	}
	b, err := parseBehavior(c.Behavior)
	if err != nil {
		return nil, fmt.Errorf("pre_tokenizer Split: %w", err)
	}
	if c.Pattern.Regex != nil {
		if fast := fastMatcherFor(*c.Pattern.Regex); fast != nil {
			m = fast
		}
	}
	return split{m: m, behavior: b, invert: c.Invert}, nil
}

func (s split) preTokenize(in []piece) ([]piece, error) {
	return splitPieces(in, s.m, s.behavior, s.invert)
}

// funcSplit splits on runes for which pred holds.
type funcSplit struct {
	pred     func(rune) bool
	behavior behavior
}

func (f funcSplit) preTokenize(in []piece) ([]piece, error) {
	return splitPieces(in, runeMatcher{f.pred}, f.behavior, false)
}

// byteLevelPre is the ByteLevel pre-tokenizer: optional leading space,
// optional GPT-2 regex split, then bytes mapped to the byte-level alphabet.
type byteLevelPre struct {
	addPrefixSpace bool
	m              matcher // nil when use_regex is off
}

func newByteLevelPre(addPrefixSpace, useRegex bool) (preTokenizer, error) {
	b := byteLevelPre{addPrefixSpace: addPrefixSpace}
	if useRegex {
		b.m = fastMatcherFor(gpt2Pattern)
		if b.m == nil {
			re, err := compileRegex(gpt2Pattern)
			if err != nil {
				return nil, err
			}
			b.m = regexMatcher{re}
		}
	}
	return b, nil
}

func (b byteLevelPre) preTokenize(in []piece) ([]piece, error) {
	materialize(in)
	if b.addPrefixSpace {
		for i := range in {
			if in[i].s != "" && !strings.HasPrefix(in[i].s, " ") {
				in[i].s = " " + in[i].s
			}
		}
	}
	if b.m != nil {
		var err error
		if in, err = splitPieces(in, b.m, behaviorIsolated, false); err != nil {
			return nil, err
		}
	}
	for i := range in {
		in[i].raw = true
	}
	return in, nil
}

// metaspace replaces spaces with a marker (▁), optionally prepends it, and
// optionally splits before every marker.
type metaspace struct {
	repl          string
	prependScheme string
	split         bool
}

func parseMetaspace(c *component) (preTokenizer, error) {
	m, err := newMetaspace(c)
	if err != nil {
		return nil, fmt.Errorf("pre_tokenizer Metaspace: %w", err)
	}
	return m, nil
}

func newMetaspace(c *component) (metaspace, error) {
	repl := c.Replacement
	if repl == "" {
		repl = "▁"
	}
	if utf8.RuneCountInString(repl) != 1 {
		return metaspace{}, fmt.Errorf("replacement %q is not one character", repl)
	}
	scheme := c.PrependScheme
	if scheme == "" {
		scheme = "always"
		if c.AddPrefixSpace != nil && !*c.AddPrefixSpace {
			scheme = "never"
		}
	}
	switch scheme {
	case "always", "first", "never":
	default:
		return metaspace{}, fmt.Errorf("unknown prepend_scheme %q", scheme)
	}
	return metaspace{repl: repl, prependScheme: scheme, split: boolOr(c.Split, true)}, nil
}

func (m metaspace) preTokenize(in []piece) ([]piece, error) {
	materialize(in)
	for i := range in {
		s := strings.ReplaceAll(in[i].s, " ", m.repl)
		prepend := m.prependScheme == "always" || (m.prependScheme == "first" && in[i].atStart)
		if prepend && s != "" && !strings.HasPrefix(s, m.repl) {
			s = m.repl + s
		}
		in[i].s = s
	}
	if !m.split {
		return in, nil
	}
	r, _ := utf8.DecodeRuneInString(m.repl)
	return splitPieces(in, runeMatcher{func(c rune) bool { return c == r }}, behaviorMergedWithNext, false)
}

// whitespacePre splits into runs of word characters and runs of other
// non-space characters (the reference's `\w+|[^\w\s]+`), dropping spaces.
type whitespacePre struct{}

func (whitespacePre) preTokenize(in []piece) ([]piece, error) {
	materialize(in)
	out := make([]piece, 0, len(in)*2)
	for _, p := range in {
		start, class := 0, 0 // class: 0 space, 1 word, 2 other
		flush := func(end int) {
			if class != 0 && end > start {
				out = append(out, piece{s: p.s[start:end], atStart: p.atStart && start == 0})
			}
		}
		for i, r := range p.s {
			c := 2
			switch {
			case isWordChar(r):
				c = 1
			case unicode.IsSpace(r):
				c = 0
			}
			if c != class {
				flush(i)
				start, class = i, c
			}
		}
		flush(len(p.s))
	}
	return out, nil
}

// isWordChar is Rust regex's Unicode `\w`.
func isWordChar(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.Is(unicode.M, r) || unicode.Is(unicode.Nd, r) ||
		unicode.Is(unicode.Pc, r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r) ||
		r == 0x200C || r == 0x200D
}

// isNumeric is Rust's char::is_numeric (general categories Nd, Nl, No).
func isNumeric(r rune) bool {
	return unicode.IsNumber(r)
}

// isPunctuation is the Punctuation pre-tokenizer's test: ASCII punctuation
// or Unicode general category P.
func isPunctuation(r rune) bool {
	return (r < utf8.RuneSelf && unicode.IsPunct(r)) || (r < utf8.RuneSelf && strings.ContainsRune("$+<=>^`|~", r)) ||
		unicode.In(r, unicode.P)
}

// isBertPunctuation is BertPreTokenizer's test (same as isPunctuation).
func isBertPunctuation(r rune) bool { return isPunctuation(r) }
