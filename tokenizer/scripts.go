package tokenizer

import (
	"sort"
	"unicode"
)

// unicodeScripts is the UnicodeScripts pre-tokenizer: it cuts wherever the
// Unicode script changes. As in the reference, Hiragana, Katakana and
// U+30FC count as Han, and a space or a code point without a script is
// "any": it joins its neighbours and never starts a cut. Like the
// reference, text before the first character with a script is dropped
// (only spaces and unassigned code points can be there).
type unicodeScripts struct{}

func (unicodeScripts) preTokenize(in []piece) ([]piece, error) {
	materialize(in)
	out := make([]piece, 0, len(in)*2)
	for _, p := range in {
		var cuts []int
		last := scriptNone
		for i, r := range p.s {
			sc := fixedScript(r)
			if sc != scriptAny && last != scriptAny && last != sc {
				cuts = append(cuts, i)
			}
			if sc != scriptAny {
				last = sc
			}
		}
		cuts = append(cuts, len(p.s))
		for k := 0; k+1 < len(cuts); k++ {
			if cuts[k+1] > cuts[k] {
				out = append(out, piece{s: p.s[cuts[k]:cuts[k+1]], atStart: p.atStart && cuts[k] == 0})
			}
		}
	}
	return out, nil
}

const (
	scriptNone = -2 // before the first character
	scriptAny  = -1
)

// scriptRange is one range of a Unicode script table.
type scriptRange struct {
	lo, hi rune
	script int
}

var (
	scriptRanges []scriptRange
	scriptHan    int
	scriptKana   [2]int // Hiragana, Katakana
)

func init() {
	names := make([]string, 0, len(unicode.Scripts))
	for name := range unicode.Scripts {
		names = append(names, name)
	}
	sort.Strings(names)
	for i, name := range names {
		switch name {
		case "Han":
			scriptHan = i
		case "Hiragana":
			scriptKana[0] = i
		case "Katakana":
			scriptKana[1] = i
		}
		t := unicode.Scripts[name]
		for _, r := range t.R16 {
			addScriptRange(rune(r.Lo), rune(r.Hi), rune(r.Stride), i)
		}
		for _, r := range t.R32 {
			addScriptRange(rune(r.Lo), rune(r.Hi), rune(r.Stride), i)
		}
	}
	sort.Slice(scriptRanges, func(a, b int) bool { return scriptRanges[a].lo < scriptRanges[b].lo })
}

// fixedScript is the reference's fixed_script.
func fixedScript(r rune) int {
	if r == 0x30FC {
		return scriptHan
	}
	if r == ' ' {
		return scriptAny
	}
	i := sort.Search(len(scriptRanges), func(i int) bool { return scriptRanges[i].hi >= r })
	if i == len(scriptRanges) || scriptRanges[i].lo > r {
		return scriptAny
	}
	sc := scriptRanges[i].script
	if sc == scriptKana[0] || sc == scriptKana[1] {
		return scriptHan
	}
	return sc
}

// addScriptRange appends the runes lo..hi (every stride-th) of script i to
// scriptRanges: one range when the stride is 1, else one per rune.
func addScriptRange(lo, hi, stride rune, i int) {
	if stride == 1 {
		scriptRanges = append(scriptRanges, scriptRange{lo, hi, i})
		return
	}
	for r := lo; r <= hi; r += stride {
		scriptRanges = append(scriptRanges, scriptRange{r, r, i})
	}
}
