package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// byteChar maps every byte to the printable rune GPT-2's bytes_to_unicode
// assigns it: printable Latin-1 bytes stand for themselves, the other 68
// bytes are shifted to U+0100 and up in byte order.
var byteChar [256]rune

// byteCharStr holds byteChar as UTF-8 strings, for building mapped words.
var byteCharStr [256]string

// charByte is the inverse of byteChar, -1 for runes outside the alphabet
// (all alphabet runes are below 0x144).
var charByte [0x144]int16

func init() {
	for i := range charByte {
		charByte[i] = -1
	}
	n := 0
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			byteChar[b] = rune(b)
		} else {
			byteChar[b] = rune(256 + n)
			n++
		}
		byteCharStr[b] = string(byteChar[b])
		charByte[byteChar[b]] = int16(b)
	}
}

// byteLevelString maps the UTF-8 bytes of s to the byte-level alphabet.
func byteLevelString(s string) string {
	var sb strings.Builder
	sb.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		sb.WriteString(byteCharStr[s[i]])
	}
	return sb.String()
}

// appendByteLevelBytes appends the bytes the byte-level string s stands
// for; ok is false (and dst unchanged) when a rune lies outside the
// alphabet.
func appendByteLevelBytes(dst []byte, s string) (out []byte, ok bool) {
	n := len(dst)
	for _, r := range s {
		if r < 0 || int(r) >= len(charByte) || charByte[r] < 0 {
			return dst[:n], false
		}
		dst = append(dst, byte(charByte[r]))
	}
	return dst, true
}

// lossyUTF8 converts b to a string the way Rust's String::from_utf8_lossy
// does: every maximal invalid subpart becomes one U+FFFD.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || size > 1 {
			sb.WriteString(string(b[i : i+size]))
			i += size
			continue
		}
		sb.WriteRune(utf8.RuneError)
		i += invalidSubpartLen(b[i:])
	}
	return sb.String()
}

// invalidSubpartLen is the length of the maximal subpart of an ill-formed
// UTF-8 sequence starting at b[0] (Unicode 15, section 3.9, table 3-7).
func invalidSubpartLen(b []byte) int {
	lo, hi, need := byte(0x80), byte(0xBF), 0
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		lo, need = 0xA0, 2
	case c == 0xED:
		hi, need = 0x9F, 2
	case c >= 0xE1 && c <= 0xEF:
		need = 2
	case c == 0xF0:
		lo, need = 0x90, 3
	case c == 0xF4:
		hi, need = 0x8F, 3
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	default:
		return 1
	}
	n := 1
	for ; n <= need && n < len(b); n++ {
		if b[n] < lo || b[n] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return n
}

// validUTF8 returns s with invalid bytes replaced like lossyUTF8, so that
// the pipeline (which assumes Rust's `str` guarantees) sees valid UTF-8.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return lossyUTF8([]byte(s))
}
