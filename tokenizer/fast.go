package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The split regexes of GPT-2, Qwen, Llama-3 and DeepSeek-V3 run through a
// backtracking engine at about 5 MB/s. fastMatcherFor recognizes them by
// their exact text and returns a hand-written matcher with the same
// leftmost-first semantics: at each position the alternatives are tried in
// order, each yielding the match a backtracking engine would find first,
// and positions where none matches are skipped. fast_test.go checks every
// one differentially against regexp2 on random text.

// Known patterns, byte for byte as they appear in tokenizer.json files.
const (
	qwenPattern      = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	llama3Pattern    = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	digits3Pattern   = `\p{N}{1,3}`
	cjkPattern       = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	deepseekPattern  = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
	deepseekPattern2 = `[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_` + "`" + `{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// alt is one alternative of a pattern: the byte offset where its
// preferred match starting at byte i ends, or ok=false.
type alt func(s string, i int) (end int, ok bool)

// altMatcher tries its alternatives in order at every position.
type altMatcher struct {
	alts []alt
}

func fastMatcherFor(pattern string) matcher {
	switch pattern {
	case qwenPattern:
		return altMatcher{[]alt{contraction(true), letterRun(notCRLFLetterNumber, isLetter), numberRun(1),
			punctRun(notSpaceLetterNumber), newlineRun, spaceNotBeforeNonSpace, spaceRun}}
	case llama3Pattern:
		return altMatcher{[]alt{contraction(true), letterRun(notCRLFLetterNumber, isLetter), numberRun(3),
			punctRun(notSpaceLetterNumber), newlineRun, spaceNotBeforeNonSpace, spaceRun}}
	case gpt2Pattern:
		return altMatcher{[]alt{contraction(false), spaceThen(isLetter), spaceThen(isNumber),
			spaceThen(notSpaceLetterNumber), spaceNotBeforeNonSpace, spaceRun}}
	case digits3Pattern:
		return altMatcher{[]alt{numberRun(3)}}
	case cjkPattern:
		return altMatcher{[]alt{classRun(isCJKOrKana)}}
	case deepseekPattern, deepseekPattern2:
		return altMatcher{[]alt{asciiPunctThenLetters, letterRun(notCRLFLetterPunctSymbol, isLetterOrMark),
			punctRun(isPunctOrSymbol), newlineRun, spaceNotBeforeNonSpace, spaceRun}}
	}
	return nil
}

func (m altMatcher) findMatches(s string, out []span) ([]span, error) {
	if s == "" {
		return append(out, span{0, 0, false}), nil
	}
	prev := 0 // end of the last match
	for i := 0; i < len(s); {
		end, ok := 0, false
		for _, a := range m.alts {
			if end, ok = a(s, i); ok {
				break
			}
		}
		if !ok || end <= i {
			_, n := decode(s, i)
			i += n
			continue
		}
		if prev != i {
			out = append(out, span{prev, i, false})
		}
		out = append(out, span{i, end, true})
		prev, i = end, end
	}
	if prev != len(s) {
		out = append(out, span{prev, len(s), false})
	}
	return out, nil
}

// decode returns the rune at byte i (i < len(s)) and its size.
func decode(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// Character classes, matching regexp2 / Oniguruma on Unicode 15.

func isLetter(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
	}
	return unicode.IsLetter(r)
}

func isNumber(r rune) bool {
	if r < utf8.RuneSelf {
		return '0' <= r && r <= '9'
	}
	return unicode.IsNumber(r)
}

func isSpace(r rune) bool {
	if r < utf8.RuneSelf {
		return r == ' ' || '\t' <= r && r <= '\r'
	}
	return unicode.IsSpace(r)
}

func isCRLF(r rune) bool { return r == '\r' || r == '\n' }

func isLetterOrMark(r rune) bool { return isLetter(r) || r >= utf8.RuneSelf && unicode.IsMark(r) }

func isPunctOrSymbol(r rune) bool {
	if r < utf8.RuneSelf {
		return r > ' ' && r < 0x7F && !isLetter(r) && !isNumber(r)
	}
	return unicode.IsPunct(r) || unicode.IsSymbol(r)
}

// notCRLFLetterNumber is [^\r\n\p{L}\p{N}].
func notCRLFLetterNumber(r rune) bool { return !isCRLF(r) && !isLetter(r) && !isNumber(r) }

// notSpaceLetterNumber is [^\s\p{L}\p{N}].
func notSpaceLetterNumber(r rune) bool { return !isSpace(r) && !isLetter(r) && !isNumber(r) }

// notCRLFLetterPunctSymbol is [^\r\n\p{L}\p{P}\p{S}].
func notCRLFLetterPunctSymbol(r rune) bool { return !isCRLF(r) && !isLetter(r) && !isPunctOrSymbol(r) }

func isCJKOrKana(r rune) bool {
	return r >= 0x4E00 && r <= 0x9FA5 || r >= 0x3040 && r <= 0x309F || r >= 0x30A0 && r <= 0x30FF
}

func isASCIILetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// runEnd is the end of the run of class members starting at byte i.
func runEnd(s string, i int, class func(rune) bool) int {
	for i < len(s) {
		r, n := decode(s, i)
		if !class(r) {
			break
		}
		i += n
	}
	return i
}

// at reports whether the rune at byte i exists and is in class; n is its
// size.
func at(s string, i int, class func(rune) bool) (ok bool, n int) {
	if i >= len(s) {
		return false, 0
	}
	r, n := decode(s, i)
	return class(r), n
}

// contraction is '(s|t|re|ve|m|ll|d), case-insensitive or not. With
// Oniguruma's Unicode case folding U+017F (long s) also matches s.
func contraction(fold bool) alt {
	suffixes := []string{"s", "t", "re", "ve", "m", "ll", "d"}
	return func(s string, i int) (int, bool) {
		if s[i] != '\'' {
			return 0, false
		}
	next:
		for _, suf := range suffixes {
			j := i + 1
			for k := 0; k < len(suf); k++ {
				if j >= len(s) {
					continue next
				}
				want := suf[k]
				switch c := s[j]; {
				case c == want || fold && c == want-'a'+'A':
					j++
				case fold && want == 's' && strings.HasPrefix(s[j:], "\u017F"):
					j += 2
				default:
					continue next
				}
			}
			return j, true
		}
		return 0, false
	}
}

// letterRun is opt? body+ where opt is one optional rune: taken only if a
// body rune follows it (otherwise the engine backtracks to no opt).
func letterRun(opt, body func(rune) bool) alt {
	return func(s string, i int) (int, bool) {
		r, n := decode(s, i)
		if body(r) {
			return runEnd(s, i+n, body), true
		}
		if ok, m := at(s, i+n, body); ok && opt(r) {
			return runEnd(s, i+n+m, body), true
		}
		return 0, false
	}
}

// numberRun is \p{N}{1,max}.
func numberRun(max int) alt {
	return func(s string, i int) (int, bool) {
		j := i
		for k := 0; k < max; k++ {
			ok, n := at(s, j, isNumber)
			if !ok {
				break
			}
			j += n
		}
		return j, j > i
	}
}

// classRun is class+.
func classRun(class func(rune) bool) alt {
	return func(s string, i int) (int, bool) {
		j := runEnd(s, i, class)
		return j, j > i
	}
}

// optSpaceRun matches ` ?class+` and returns the end of the class run.
func optSpaceRun(s string, i int, class func(rune) bool) (int, bool) {
	j := i
	if s[j] == ' ' {
		if ok, _ := at(s, j+1, class); ok {
			j++
		}
	}
	ok, n := at(s, j, class)
	if !ok {
		return 0, false
	}
	return runEnd(s, j+n, class), true
}

// punctRun is ` ?class+[\r\n]*`.
func punctRun(class func(rune) bool) alt {
	return func(s string, i int) (int, bool) {
		j, ok := optSpaceRun(s, i, class)
		if !ok {
			return 0, false
		}
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j, true
	}
}

// spaceThen is ` ?class+` (the GPT-2 pattern's letter, number and other
// runs).
func spaceThen(class func(rune) bool) alt {
	return func(s string, i int) (int, bool) {
		return optSpaceRun(s, i, class)
	}
}

// asciiPunctThenLetters is one ASCII punctuation or symbol byte followed by
// ASCII letters, DeepSeek's first alternative.
func asciiPunctThenLetters(s string, i int) (int, bool) {
	if c := s[i]; c >= utf8.RuneSelf || !isPunctOrSymbol(rune(c)) {
		return 0, false
	}
	j := i + 1
	for j < len(s) && isASCIILetter(s[j]) {
		j++
	}
	return j, j > i+1
}

// newlineRun is \s*[\r\n]+: the whitespace run up to and including its
// last CR or LF (the greedy \s* gives back runes until one is found).
func newlineRun(s string, i int) (int, bool) {
	end := -1
	for j := i; j < len(s); {
		r, n := decode(s, j)
		if !isSpace(r) {
			break
		}
		j += n
		if r == '\r' || r == '\n' {
			end = j
		}
	}
	return end, end > i
}

// spaceNotBeforeNonSpace is \s+(?!\S): the whole whitespace run at the end
// of the text, otherwise the run minus its last rune (if that leaves one).
func spaceNotBeforeNonSpace(s string, i int) (int, bool) {
	j, last := i, i
	for j < len(s) {
		r, n := decode(s, j)
		if !isSpace(r) {
			break
		}
		last = j
		j += n
	}
	switch {
	case j == i:
		return 0, false
	case j == len(s):
		return j, true
	case last > i:
		return last, true
	}
	return 0, false
}

// spaceRun is \s+.
func spaceRun(s string, i int) (int, bool) {
	j := runEnd(s, i, isSpace)
	return j, j > i
}
