package tokenizer

import (
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
	if lit, ok := r.m.(literalMatcher); ok {
		return lit.replaceAll(s, r.content), nil
	}
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
