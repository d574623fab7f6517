package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A tokenizer.json is ~10 MB, nearly all of it the model's vocab object
// and merges array. Decoding those through encoding/json's reflection
// (and validating the document twice) took ~0.4 s, so this scanner walks
// the document once. It works on one string copy of the file, so vocab
// and merge strings without escapes are substrings of it and cost no
// allocation. Small values (normalizer, added_tokens, ...) are cut out as
// raw JSON and handed to encoding/json.

// scanner walks JSON text. Every step is bounds-checked: it reports an
// error on malformed input rather than panicking (FuzzParse checks).
type scanner struct {
	data string
	pos  int
}

// maxDepth bounds nesting in skipped values.
const maxDepth = 10000

func (s *scanner) errorf(format string, args ...any) error {
	return fmt.Errorf("json at byte %d: %s", s.pos, fmt.Sprintf(format, args...))
}

func (s *scanner) skipWS() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// eat consumes c (after whitespace) if it is next.
func (s *scanner) eat(c byte) bool {
	s.skipWS()
	if s.pos < len(s.data) && s.data[s.pos] == c {
		s.pos++
		return true
	}
	return false
}

func (s *scanner) peek() byte {
	s.skipWS()
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// str reads a JSON string. Strings with escapes or invalid UTF-8 go
// through encoding/json, which also replaces invalid UTF-8 with U+FFFD.
func (s *scanner) str() (string, error) {
	if !s.eat('"') {
		return "", s.errorf("want a string")
	}
	start := s.pos
	slow := false
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '\\':
			slow = true
			s.pos += 2
			continue
		case c == '"':
			s.pos++
			raw := s.data[start : s.pos-1]
			if !slow && utf8.ValidString(raw) {
				return raw, nil
			}
			var out string
			if err := json.Unmarshal([]byte(s.data[start-1:s.pos]), &out); err != nil {
				return "", s.errorf("%v", err)
			}
			return out, nil
		case c < 0x20:
			return "", s.errorf("control character in string")
		}
		s.pos++
	}
	return "", s.errorf("unterminated string")
}

// object calls field for each key; field must consume the value.
func (s *scanner) object(field func(key string) error) error {
	if !s.eat('{') {
		return s.errorf("want an object")
	}
	if s.eat('}') {
		return nil
	}
	for {
		key, err := s.str()
		if err != nil {
			return err
		}
		if !s.eat(':') {
			return s.errorf("want ':' after key %q", key)
		}
		if err := field(key); err != nil {
			return err
		}
		if s.eat('}') {
			return nil
		}
		if !s.eat(',') {
			return s.errorf("want ',' or '}'")
		}
	}
}

// array calls elem for each element; elem must consume it.
func (s *scanner) array(elem func(i int) error) error {
	if !s.eat('[') {
		return s.errorf("want an array")
	}
	if s.eat(']') {
		return nil
	}
	for i := 0; ; i++ {
		if err := elem(i); err != nil {
			return err
		}
		if s.eat(']') {
			return nil
		}
		if !s.eat(',') {
			return s.errorf("want ',' or ']'")
		}
	}
}

// skipValue consumes one value and returns its raw text; nested values are
// only checked for balanced brackets (encoding/json validates any skipped
// value that is used later).
func (s *scanner) skipValue() (string, error) {
	s.skipWS()
	start := s.pos
	depth := 0
	for {
		if s.pos >= len(s.data) {
			return "", s.errorf("unexpected end of input")
		}
		switch c := s.data[s.pos]; {
		case c == '"':
			if _, err := s.str(); err != nil {
				return "", err
			}
		case c == '{' || c == '[':
			if depth++; depth > maxDepth {
				return "", s.errorf("nesting too deep")
			}
			s.pos++
		case c == '}' || c == ']':
			if depth--; depth < 0 {
				return "", s.errorf("unbalanced %q", c)
			}
			s.pos++
		case c == ',' || c == ':' || c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if depth == 0 {
				return "", s.errorf("unexpected %q", c)
			}
			s.pos++
		default:
			s.literal()
		}
		if depth == 0 {
			return s.data[start:s.pos], nil
		}
	}
}

// literal consumes a number, true, false or null (or junk of that shape).
func (s *scanner) literal() {
	start := s.pos
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		if c == ',' || c == '}' || c == ']' || c == ':' || c == '"' || c == '{' || c == '[' ||
			c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			break
		}
		s.pos++
	}
	if s.pos == start {
		s.pos++ // never stall
	}
}

// integer reads a JSON number that must be a non-negative int32.
func (s *scanner) integer() (int, error) {
	s.skipWS()
	start := s.pos
	s.literal()
	n, err := strconv.ParseUint(s.data[start:s.pos], 10, 31)
	if err != nil {
		return 0, s.errorf("want a non-negative integer id, got %q", s.data[start:s.pos])
	}
	return int(n), nil
}

// MaxVocab caps a tokenizer's vocabulary and merges: no model's vocabulary
// comes near it (Spark-X2.5's has 131072 tokens, the largest public ones
// 262144), and a tokenizer.json past it only costs memory.
const MaxVocab = 1 << 20

// errVocabCap refuses a list past MaxVocab entries.
func errVocabCap(what string) error {
	return fmt.Errorf("more than %d %s: no model's vocabulary is that large (Spark-X2.5's has 131072 tokens)", MaxVocab, what)
}

// vocab reads the model's token -> id object.
func (s *scanner) vocab() (map[string]int, error) {
	raw, err := s.skipValue()
	if err != nil {
		return nil, err
	}
	sub := scanner{data: raw}
	v := make(map[string]int, min(strings.Count(raw, ",")+1, MaxVocab))
	err = sub.object(func(key string) error {
		if len(v) >= MaxVocab {
			return errVocabCap("tokens")
		}
		id, err := sub.integer()
		v[key] = id
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("vocab: %w", err)
	}
	return v, nil
}

// merges reads the merges array. Each entry is "a b" or ["a", "b"];
// string entries starting with "#version" are dropped, as the reference
// does, and must otherwise split on ' ' into exactly two parts.
func (s *scanner) merges() ([][2]string, error) {
	out := [][2]string{}
	err := s.array(func(i int) error {
		if i >= MaxVocab {
			return errVocabCap("merges")
		}
		if s.peek() == '[' {
			var pair [2]string
			n := 0
			err := s.array(func(k int) error {
				if k > 1 {
					return s.errorf("merge %d has more than two parts", i)
				}
				var err error
				pair[k], err = s.str()
				n++
				return err
			})
			if err == nil && n != 2 {
				err = s.errorf("merge %d has %d parts, want 2", i, n)
			}
			out = append(out, pair)
			return err
		}
		line, err := s.str()
		if err != nil {
			return err
		}
		if strings.HasPrefix(line, "#version") {
			return nil
		}
		a, b, ok := strings.Cut(line, " ")
		if !ok || strings.Contains(b, " ") {
			return s.errorf("merge %d %q is not two tokens separated by one space", i, line)
		}
		out = append(out, [2]string{a, b})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("merges: %w", err)
	}
	return out, nil
}
