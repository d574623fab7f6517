package tokenizer

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// fastPatterns are the patterns fastMatcherFor knows.
var fastPatterns = map[string]string{
	"qwen":      qwenPattern,
	"llama3":    llama3Pattern,
	"gpt2":      gpt2Pattern,
	"digits3":   digits3Pattern,
	"cjk":       cjkPattern,
	"deepseek":  deepseekPattern,
	"deepseek2": deepseekPattern2,
}

// trickyRunes covers every class boundary the patterns care about. U+017F
// (long s) is left out: Oniguruma's case folding lets `(?i:'s)` match it
// and regexp2's does not (see TestContractionLongS).
var trickyRunes = []rune("aZé中ぁア한ك\u0301\u0903\u20DD0٣½Ⅻ'sStTrReEvVmMlLdD" +
	" \t\n\r\v\f\u0085\u00A0\u2028\u2029\u3000\u200B\u2003" +
	".,!?-_()[]{}\\\"#$%&*+/:;<=>@^`|~«»¿、。「」©€→\U0001F600\U0001F3FB\u200D\x00\x1B\uFEFF")

func randomTricky(r *rand.Rand, n int) string {
	var sb strings.Builder
	for i := 0; i < n; i++ {
		sb.WriteRune(trickyRunes[r.IntN(len(trickyRunes))])
	}
	return sb.String()
}

// TestFastMatchersAgreeWithRegexp2 compares each hand-written matcher with
// regexp2 running the original pattern on random text.
func TestFastMatchersAgreeWithRegexp2(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 300
	}
	for name, pat := range fastPatterns {
		t.Run(name, func(t *testing.T) {
			fast := fastMatcherFor(pat)
			if fast == nil {
				t.Fatal("pattern not recognized")
			}
			re, err := compileRegex(pat)
			if err != nil {
				t.Fatal(err)
			}
			slow := regexMatcher{re}
			r := rand.New(rand.NewPCG(1, uint64(len(pat))))
			for i := 0; i < n; i++ {
				s := randomTricky(r, 1+r.IntN(24))
				assertSameSpans(t, fast, slow, s)
			}
			for _, s := range fixedSplitCases {
				assertSameSpans(t, fast, slow, s)
			}
		})
	}
}

var fixedSplitCases = []string{
	"", "a", " ", "  ", "   a", "a   ", "\n", " \n \n x", "it's THEY'RE we'Ll I'M you'D",
	"12345678", "x1234y", "  \t\r\n  foo", "hello, world!!\r\n\r\n", "'", "''s", " 's", "a'b",
	"中文字符ひらがなカタカナ", "e\u0301\u0301x", "\u00A0\u00A0x", "$$$abc", "-abc", " -- ",
}

func assertSameSpans(t *testing.T, fast, slow matcher, s string) {
	t.Helper()
	want, err := slow.findMatches(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := fast.findMatches(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n got %v\nwant %v", s, got, want)
	}
}

// TestContractionLongS pins the one deliberate difference from regexp2:
// the reference's Oniguruma folds U+017F to s under (?i).
func TestContractionLongS(t *testing.T) {
	got, err := fastMatcherFor(qwenPattern).findMatches("a'\u017F", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []span{{0, 1, true}, {1, 4, true}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// FuzzFastMatchers checks the hand-written matchers against regexp2 on
// arbitrary valid UTF-8 (without U+017F, see TestContractionLongS).
func FuzzFastMatchers(f *testing.F) {
	for _, s := range fixedSplitCases {
		f.Add(s)
	}
	names := []string{"qwen", "llama3", "gpt2", "digits3", "cjk", "deepseek"}
	slow := map[string]matcher{}
	for _, n := range names {
		re, err := compileRegex(fastPatterns[n])
		if err != nil {
			f.Fatal(err)
		}
		slow[n] = regexMatcher{re}
	}
	f.Fuzz(func(t *testing.T, s string) {
		s = validUTF8(s)
		if strings.ContainsRune(s, 0x17F) || len(s) > 512 {
			return
		}
		for _, n := range names {
			assertSameSpans(t, fastMatcherFor(fastPatterns[n]), slow[n], s)
		}
	})
}
