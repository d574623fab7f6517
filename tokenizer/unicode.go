package tokenizer

import (
	"sort"
	"sync"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// normalizeForm applies a Unicode normalization form exactly as the
// reference does. golang.org/x/text implements the Stream-Safe Text Format:
// after 30 non-starters in a row it inserts U+034F and stops reordering
// across it, which full normalization (the reference's) never does. Text
// with such runs goes through normalizeFull instead; everything else takes
// the fast x/text path, which is exact there.
func normalizeForm(form norm.Form, s string) string {
	if !longNonStarterRun(s) {
		return form.String(s)
	}
	return normalizeFull(form, s)
}

// maxFastNonStarters is the longest run of (decomposed) non-starters that
// normalizeForm leaves to x/text; well under its limit of 30.
const maxFastNonStarters = 24

// longNonStarterRun reports whether s may hold a run of non-starters long
// enough for x/text to insert a grapheme joiner. It over-estimates: every
// rune of a decomposition that starts or ends with a non-starter counts.
func longNonStarterRun(s string) bool {
	run := 0
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			run = 0
			i++
			continue
		}
		p := norm.NFKD.PropertiesString(s[i:])
		n := utf8.RuneCount(p.Decomposition())
		if n == 0 {
			n = 1
		}
		switch {
		case p.LeadCCC() != 0 || p.CCC() != 0:
			run += n
		case p.TrailCCC() != 0:
			run = n
		default:
			run = 0
		}
		if run > maxFastNonStarters {
			return true
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return false
}

// Hangul syllable constants (Unicode section 3.12).
const (
	hangulSBase  = 0xAC00
	hangulLBase  = 0x1100
	hangulVBase  = 0x1161
	hangulTBase  = 0x11A7
	hangulLCount = 19
	hangulVCount = 21
	hangulTCount = 28
	hangulNCount = hangulVCount * hangulTCount
	hangulSCount = hangulLCount * hangulNCount
)

// normalizeFull is textbook normalization: full decomposition, canonical
// ordering of whole non-starter runs, then canonical composition.
func normalizeFull(form norm.Form, s string) string {
	compat := form == norm.NFKC || form == norm.NFKD
	rs := decomposeAll(s, compat)
	canonicalOrder(rs)
	if form == norm.NFC || form == norm.NFKC {
		rs = compose(rs)
	}
	return string(rs)
}

func decomposeAll(s string, compat bool) []rune {
	dform := norm.NFD
	if compat {
		dform = norm.NFKD
	}
	out := make([]rune, 0, len(s))
	for _, r := range s {
		if r >= hangulSBase && r < hangulSBase+hangulSCount {
			si := r - hangulSBase
			out = append(out, hangulLBase+si/hangulNCount, hangulVBase+(si%hangulNCount)/hangulTCount)
			if t := si % hangulTCount; t != 0 {
				out = append(out, hangulTBase+t)
			}
			continue
		}
		d := dform.PropertiesString(string(r)).Decomposition()
		if d == nil {
			out = append(out, r)
			continue
		}
		for _, dr := range string(d) {
			out = append(out, dr)
		}
	}
	return out
}

func ccc(r rune) uint8 {
	if r < 0x300 {
		return 0
	}
	return norm.NFD.PropertiesString(string(r)).CCC()
}

// canonicalOrder stably sorts every run of non-starters by combining class.
func canonicalOrder(rs []rune) {
	for i := 0; i < len(rs); {
		if ccc(rs[i]) == 0 {
			i++
			continue
		}
		j := i
		for j < len(rs) && ccc(rs[j]) != 0 {
			j++
		}
		run := rs[i:j]
		sort.SliceStable(run, func(a, b int) bool { return ccc(run[a]) < ccc(run[b]) })
		i = j
	}
}

// compose is the canonical composition algorithm of UAX #15.
func compose(rs []rune) []rune {
	out := rs[:0]
	starter := -1
	for _, c := range rs {
		cc := ccc(c)
		if starter >= 0 {
			last := out[len(out)-1]
			lastCC := ccc(last)
			adjacent := len(out)-1 == starter
			if adjacent || (lastCC != 0 && lastCC < cc) {
				if p, ok := composePair(out[starter], c); ok {
					out[starter] = p
					continue
				}
			}
		}
		if cc == 0 {
			starter = len(out)
		}
		out = append(out, c)
	}
	return out
}

var (
	compositionsOnce sync.Once
	compositions     map[[2]rune]rune
)

// composePair returns the primary composite of a and b, if there is one.
func composePair(a, b rune) (rune, bool) {
	if a >= hangulLBase && a < hangulLBase+hangulLCount && b >= hangulVBase && b < hangulVBase+hangulVCount {
		return hangulSBase + ((a-hangulLBase)*hangulVCount+(b-hangulVBase))*hangulTCount, true
	}
	if a >= hangulSBase && a < hangulSBase+hangulSCount && (a-hangulSBase)%hangulTCount == 0 &&
		b > hangulTBase && b < hangulTBase+hangulTCount {
		return a + (b - hangulTBase), true
	}
	compositionsOnce.Do(buildCompositions)
	r, ok := compositions[[2]rune{a, b}]
	return r, ok
}

// buildCompositions derives the canonical composition pairs from x/text's
// tables: a rune that NFC leaves alone and that has a canonical
// decomposition is a primary composite; its one-level decomposition is the
// NFC of all but the last rune of its full decomposition, plus that rune.
func buildCompositions() {
	compositions = make(map[[2]rune]rune, 1024)
	for r := rune(0xC0); r <= unicodeMax; r++ {
		if r >= 0xD800 && r <= 0xDFFF || r >= hangulSBase && r < hangulSBase+hangulSCount {
			continue
		}
		d := norm.NFD.PropertiesString(string(r)).Decomposition()
		if d == nil {
			continue
		}
		full := []rune(string(d))
		if len(full) < 2 || norm.NFC.String(string(r)) != string(r) {
			continue
		}
		first := []rune(norm.NFC.String(string(full[:len(full)-1])))
		if len(first) != 1 {
			continue
		}
		compositions[[2]rune{first[0], full[len(full)-1]}] = r
	}
}

const unicodeMax = 0x10FFFF
