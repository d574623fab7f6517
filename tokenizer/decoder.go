package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// decoder is one step of the reference's decode_chain: tokens in, tokens
// out; the final strings are concatenated.
type decoder interface {
	decodeChain(tokens []string) []string
}

func parseDecoder(raw json.RawMessage) (decoder, error) {
	if isNull(raw) {
		return nil, nil
	}
	c, err := parseComponent(raw, "decoder")
	if err != nil {
		return nil, err
	}
	switch c.Type {
	case "Sequence":
		var seq decSequence
		for i, sub := range c.Decoders {
			d, err := parseDecoder(sub)
			if err != nil {
				return nil, fmt.Errorf("decoder Sequence[%d]: %w", i, err)
			}
			if d != nil {
				seq = append(seq, d)
			}
		}
		return seq, nil
	case "ByteLevel":
		return byteLevelDec{}, nil
	case "ByteFallback":
		return byteFallbackDec{}, nil
	case "Fuse":
		return fuseDec{}, nil
	case "Strip":
		r, size := utf8.DecodeRuneInString(c.Content)
		if size == 0 || size != len(c.Content) {
			return nil, fmt.Errorf("decoder Strip: content %q is not one character", c.Content)
		}
		return stripDec{content: r, start: c.Start, stop: c.Stop}, nil
	case "Replace":
		m, err := c.Pattern.compile()
		if err != nil {
			return nil, fmt.Errorf("decoder Replace: %w", err)
		}
		return replaceDec{replace{m, c.Content}}, nil
	case "Metaspace":
		m, err := newMetaspace(c)
		if err != nil {
			return nil, fmt.Errorf("decoder Metaspace: %w", err)
		}
		return metaspaceDec{m}, nil
	case "BPEDecoder":
		suffix := "</w>"
		if c.Suffix != nil {
			suffix = *c.Suffix
		}
		return bpeDec{suffix}, nil
	case "WordPiece":
		prefix := "##"
		if c.Prefix != nil {
			prefix = *c.Prefix
		}
		return wordPieceDec{prefix: prefix, cleanup: boolOr(c.Cleanup, true)}, nil
	}
	return nil, fmt.Errorf("unsupported decoder type %q", c.Type)
}

type decSequence []decoder

func (seq decSequence) decodeChain(tokens []string) []string {
	for _, d := range seq {
		tokens = d.decodeChain(tokens)
	}
	return tokens
}

// byteLevelDec maps byte-level alphabet runes back to bytes; a token with
// a rune outside the alphabet contributes its UTF-8 bytes unchanged.
type byteLevelDec struct{}

func (byteLevelDec) decodeChain(tokens []string) []string {
	var buf []byte
	for _, t := range tokens {
		var ok bool
		if buf, ok = appendByteLevelBytes(buf, t); !ok {
			buf = append(buf, t...)
		}
	}
	return []string{lossyUTF8(buf)}
}

// byteFallbackDec turns runs of <0xNN> tokens back into text; a run that
// is not valid UTF-8 becomes one U+FFFD per byte.
type byteFallbackDec struct{}

func (byteFallbackDec) decodeChain(tokens []string) []string {
	out := make([]string, 0, len(tokens))
	var pending []byte
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if utf8.Valid(pending) {
			out = append(out, string(pending))
		} else {
			for range pending {
				out = append(out, "\uFFFD")
			}
		}
		pending = pending[:0]
	}
	for _, t := range tokens {
		if b, ok := byteToken(t); ok {
			pending = append(pending, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// byteToken parses a "<0xNN>" token.
func byteToken(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(t[3:5], 16, 8)
	if err != nil {
		return 0, false
	}
	return byte(v), true
}

type fuseDec struct{}

func (fuseDec) decodeChain(tokens []string) []string {
	return []string{strings.Join(tokens, "")}
}

// stripDec removes up to start leading and stop trailing content runes
// from every token.
type stripDec struct {
	content     rune
	start, stop int
}

func (s stripDec) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		first, _ := utf8.DecodeRuneInString(t)
		last, _ := utf8.DecodeLastRuneInString(t)
		if t == "" || (s.start == 0 || first != s.content) && (s.stop == 0 || last != s.content) {
			out[i] = t // nothing to strip
			continue
		}
		rs := []rune(t)
		lo := 0
		for lo < s.start && lo < len(rs) && rs[lo] == s.content {
			lo++
		}
		hi := len(rs)
		for n := 0; n < s.stop && hi > lo && rs[hi-1] == s.content; n++ {
			hi--
		}
		out[i] = string(rs[lo:hi])
	}
	return out
}

type replaceDec struct{ r replace }

func (d replaceDec) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		s, err := d.r.normalize(t)
		if err != nil {
			s = t
		}
		out[i] = s
	}
	return out
}

// metaspaceDec turns the marker back into spaces, dropping markers from
// the first token unless prepend_scheme is "never".
type metaspaceDec struct{ m metaspace }

func (d metaspaceDec) decodeChain(tokens []string) []string {
	r, _ := utf8.DecodeRuneInString(d.m.repl)
	out := make([]string, len(tokens))
	for i, t := range tokens {
		var sb strings.Builder
		for _, c := range t {
			switch {
			case c != r:
				sb.WriteRune(c)
			case i == 0 && d.m.prependScheme != "never":
			default:
				sb.WriteByte(' ')
			}
		}
		out[i] = sb.String()
	}
	return out
}

// bpeDec replaces the end-of-word suffix with a space (none at the end).
type bpeDec struct{ suffix string }

func (d bpeDec) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		rep := " "
		if i == len(tokens)-1 {
			rep = ""
		}
		out[i] = strings.ReplaceAll(t, d.suffix, rep)
	}
	return out
}

// wordPieceDec glues "##" continuations and spaces other tokens.
type wordPieceDec struct {
	prefix  string
	cleanup bool
}

// wordPieceCleanup lists the reference's clean-up replacements, applied
// one after the other.
var wordPieceCleanup = [][2]string{{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
	{" n't", "n't"}, {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}}

func (d wordPieceDec) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		if i != 0 {
			if strings.HasPrefix(t, d.prefix) {
				t = strings.Replace(t, d.prefix, "", 1)
			} else {
				t = " " + t
			}
		}
		if d.cleanup {
			for _, r := range wordPieceCleanup {
				t = strings.ReplaceAll(t, r[0], r[1])
			}
		}
		out[i] = t
	}
	return out
}
