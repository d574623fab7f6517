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
	case "BertNormalizer":
		lower := boolOr(c.Lowercase, true)
		return bertNorm{
			clean:   boolOr(c.CleanText, true),
			chinese: boolOr(c.HandleChineseChars, true),
			accents: boolOr(c.StripAccents, lower), // null: follow lowercase
			lower:   lower,
		}, nil
	case "Nmt":
		return nmtNorm{}, nil
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

// bertNorm is BertNormalizer: drop NUL, U+FFFD and control characters and
// turn whitespace into spaces; pad CJK ideographs with spaces; strip
// accents (NFD, then drop nonspacing marks); lowercase.
type bertNorm struct{ clean, chinese, accents, lower bool }

func (b bertNorm) normalize(s string) (string, error) {
	if b.clean || b.chinese {
		var sb strings.Builder
		sb.Grow(len(s))
		for _, r := range s {
			switch {
			case b.clean && (r == 0 || r == 0xFFFD || isBertControl(r)):
			case b.clean && isBertWhitespace(r):
				sb.WriteByte(' ')
			case b.chinese && isCJKIdeograph(r):
				sb.WriteByte(' ')
				sb.WriteRune(r)
				sb.WriteByte(' ')
			default:
				sb.WriteRune(r)
			}
		}
		s = sb.String()
	}
	if b.accents {
		s = strings.Map(func(r rune) rune {
			if unicode.Is(unicode.Mn, r) {
				return -1
			}
			return r
		}, normalizeForm(norm.NFD, s))
	}
	if b.lower {
		s, _ = lowercase{}.normalize(s)
	}
	return s, nil
}

// isBertWhitespace: tab, newline, CR, or Unicode White_Space.
func isBertWhitespace(r rune) bool {
	return r == '\t' || r == '\n' || r == '\r' || unicode.IsSpace(r)
}

// isBertControl is the reference's is_control: general category C (Cc, Cf,
// Co, Cs, and unassigned Cn), except tab, newline and CR.
func isBertControl(r rune) bool {
	if r == '\t' || r == '\n' || r == '\r' {
		return false
	}
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs) || !isAssigned(r)
}

// isAssigned reports whether r has a general category other than Cn.
func isAssigned(r rune) bool {
	return unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.C)
}

// isCJKIdeograph is the reference's is_chinese_char (CJK Unified
// Ideographs, their extensions A-E and the compatibility blocks).
func isCJKIdeograph(r rune) bool {
	return (r >= 0x4E00 && r <= 0x9FFF) || (r >= 0x3400 && r <= 0x4DBF) || (r >= 0x20000 && r <= 0x2A6DF) ||
		(r >= 0x2A700 && r <= 0x2B73F) || (r >= 0x2B740 && r <= 0x2B81F) || (r >= 0x2B920 && r <= 0x2CEAF) ||
		(r >= 0xF900 && r <= 0xFAFF) || (r >= 0x2F800 && r <= 0x2FA1F)
}

// nmtNorm is the Nmt normalizer (SentencePiece's nmt_nfkc without the
// NFKC): drop C0 controls but tab/LF/CR/FF, DEL and two C1 controls, and
// map tab, LF, FF, CR, U+1680, U+200B-U+200F, U+2028, U+2029, U+2581,
// U+FEFF and U+FFFD to a space.
type nmtNorm struct{}

func (nmtNorm) normalize(s string) (string, error) {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 0x1 && r <= 0x8, r == 0xB, r >= 0xE && r <= 0x1F, r == 0x7F, r == 0x8F, r == 0x9F:
			return -1
		case r == 0x9, r == 0xA, r == 0xC, r == 0xD, r == 0x1680, r >= 0x200B && r <= 0x200F,
			r == 0x2028, r == 0x2029, r == 0x2581, r == 0xFEFF, r == 0xFFFD:
			return ' '
		}
		return r
	}, s), nil
}
