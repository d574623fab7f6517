package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

var forms = map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}

// TestNormalizeFullMatchesXText checks the textbook normalizer against
// golang.org/x/text on every single rune and on random short strings,
// where x/text's stream-safe limit never applies.
func TestNormalizeFullMatchesXText(t *testing.T) {
	step := rune(1)
	if testing.Short() {
		step = 7
	}
	for name, f := range forms {
		bad := 0
		for r := rune(0); r <= unicodeMax && bad < 5; r += step {
			if r >= 0xD800 && r <= 0xDFFF {
				continue
			}
			s := string(r)
			if got, want := normalizeFull(f, s), f.String(s); got != want {
				t.Errorf("%s(U+%04X): got %q, want %q", name, r, got, want)
				bad++
			}
		}
	}
	alphabet := []rune("aAeEoOuUsSnNcC\u0300\u0301\u0302\u0303\u0308\u0323\u0327\u031B\u0345\u0344" +
		"\u1100\u1161\u11A8\uAC00\uAC01\u0915\u093C\u0B47\u0B3E\u0CC6\u0CD5ﬁ①ſ\u1E9B\u212B\u00C5\u03B1\u0313")
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 20000; i++ {
		var sb strings.Builder
		for n := 1 + r.IntN(8); n > 0; n-- {
			sb.WriteRune(alphabet[r.IntN(len(alphabet))])
		}
		s := sb.String()
		for name, f := range forms {
			if got, want := normalizeFull(f, s), f.String(s); got != want {
				t.Fatalf("%s(%q): got %q, want %q", name, s, got, want)
			}
		}
	}
}

// TestNormalizeLongMarkRun: 35 acute accents and a dot below on "a". Full
// NFC (the reference's) reorders the dot below (class 220) in front of
// all acutes (230) and composes it into U+1EA1; x/text's stream-safe
// format would insert U+034F after 30 marks instead.
func TestNormalizeLongMarkRun(t *testing.T) {
	in := "a" + strings.Repeat("\u0301", 35) + "\u0323b"
	want := "\u1EA1" + strings.Repeat("\u0301", 35) + "b"
	if got := normalizeForm(norm.NFC, in); got != want {
		t.Errorf("NFC: got %+q, want %+q", got, want)
	}
	if xt := norm.NFC.String(in); !strings.Contains(xt, "\u034F") {
		t.Logf("x/text no longer inserts U+034F (%+q); the full path may be unnecessary", xt)
	}
	wantD := "a\u0323" + strings.Repeat("\u0301", 35) + "b"
	if got := normalizeForm(norm.NFD, in); got != wantD {
		t.Errorf("NFD: got %+q, want %+q", got, wantD)
	}
	if !longNonStarterRun(in) || longNonStarterRun("plain ascii") || longNonStarterRun("e\u0301\u0301") {
		t.Error("longNonStarterRun misclassifies")
	}
	if got := normalizeForm(norm.NFC, "e\u0301"); got != "é" || !utf8.ValidString(got) {
		t.Errorf("fast path: got %q", got)
	}
}
