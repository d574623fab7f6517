package eval

import (
	"math"
	"strings"
	"unicode/utf8"
)

// Span is one sample's share of the token stream: positions [Start, End)
// (attributed by the sample's own token count; the stream is encoded
// once, so a boundary may be off by the tokens merged across it).
type Span struct {
	Sample int    // 1-based, in file order
	Start  int    // first stream position
	End    int    // one past the last
	Head   string // the sample's first characters, for the report
}

// SampleStats are one sample's figures: the scored tokens whose position
// lies in its span.
type SampleStats struct {
	Sample   int     `json:"sample"`
	Head     string  `json:"head"`
	Tokens   int     `json:"tokens_scored"`
	KLD      float64 `json:"kld"`       // mean
	KLDMax   float64 `json:"kld_max"`   // the worst token
	SameTop1 float64 `json:"same_top1"` // fraction
	PPLRatio float64 `json:"ppl_ratio"`
}

// WindowStats are one window's figures (a window is one sequence the
// model sees from an empty cache).
type WindowStats struct {
	Window   int     `json:"window"`
	Sample   int     `json:"sample"` // the sample holding most of its scored tokens (0: unknown)
	KLD      float64 `json:"kld"`
	SameTop1 float64 `json:"same_top1"`
}

// MinSampleTokens: a sample with fewer scored tokens is listed but not a
// candidate for the worst sample, whose mean would be noise.
const MinSampleTokens = 64

// headLen is how many characters of a sample its Head keeps.
const headLen = 48

// sampleHead is s's first headLen characters on one line.
func sampleHead(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= headLen {
		return s
	}
	r := []rune(s)
	return string(r[:headLen]) + "…"
}

// spans lays samples of counts[i] tokens (each encoded on its own), joined
// by sep tokens, over a stream of total tokens: cumulative counts scaled
// so that the last span ends at total.
func spans(counts []int, heads []string, sep, total int) []Span {
	sum := 0
	for i, c := range counts {
		sum += c
		if i > 0 {
			sum += sep
		}
	}
	if sum == 0 {
		return nil
	}
	out := make([]Span, len(counts))
	at := 0
	for i, c := range counts {
		if i > 0 {
			at += sep
		}
		start := at * total / sum
		at += c
		out[i] = Span{Sample: i + 1, Start: start, End: at * total / sum, Head: heads[i]}
	}
	out[len(out)-1].End = total
	return out
}

// sampleOf is the sample whose span holds stream position p (0: none).
func sampleOf(sp []Span, p int) int {
	lo, hi := 0, len(sp)
	for lo < hi {
		m := (lo + hi) / 2
		switch {
		case p < sp[m].Start:
			hi = m
		case p >= sp[m].End:
			lo = m + 1
		default:
			return sp[m].Sample
		}
	}
	return 0
}

// BySample gives each sample's figures from the scored tokens of windows
// of ctx tokens (a token's stream position is Window*ctx + Pos), and the
// worst sample by mean KLD among those with at least MinSampleTokens
// scored tokens (nil when none has).
func BySample(toks []Token, sp []Span, ctx int) ([]SampleStats, *SampleStats) {
	if len(sp) == 0 {
		return nil, nil
	}
	type acc struct {
		n, same              int
		kld, kmax, nll, nllB float64
	}
	accs := make([]acc, len(sp))
	for _, t := range toks {
		s := sampleOf(sp, t.Window*ctx+t.Pos)
		if s == 0 {
			continue
		}
		a := &accs[s-1]
		a.n++
		a.kld += t.KLD
		a.kmax = max(a.kmax, t.KLD)
		a.nll += t.NLL
		a.nllB += t.NLLBase
		if t.SameTop1 {
			a.same++
		}
	}
	out := make([]SampleStats, len(sp))
	var worst *SampleStats
	for i, a := range accs {
		st := SampleStats{Sample: sp[i].Sample, Head: sp[i].Head, Tokens: a.n}
		if a.n > 0 {
			fn := float64(a.n)
			st.KLD, st.KLDMax, st.SameTop1 = a.kld/fn, a.kmax, float64(a.same)/fn
			st.PPLRatio = math.Exp((a.nll - a.nllB) / fn)
		}
		out[i] = st
		if a.n >= MinSampleTokens && (worst == nil || st.KLD > worst.KLD) {
			worst = &out[i]
		}
	}
	if worst != nil {
		w := *worst
		worst = &w
	}
	return out, worst
}

// ByWindow gives each window's figures and the worst window by mean KLD.
func ByWindow(toks []Token, windows int, sp []Span, ctx int) ([]WindowStats, WindowStats) {
	out := make([]WindowStats, windows)
	n := make([]int, windows)
	votes := make([]map[int]int, windows)
	for _, t := range toks {
		w := t.Window
		if w < 0 || w >= windows {
			continue
		}
		out[w].KLD += t.KLD
		if t.SameTop1 {
			out[w].SameTop1++
		}
		n[w]++
		if s := sampleOf(sp, w*ctx+t.Pos); s > 0 {
			if votes[w] == nil {
				votes[w] = map[int]int{}
			}
			votes[w][s]++
		}
	}
	var worst WindowStats
	for w := range out {
		out[w].Window = w
		if n[w] > 0 {
			out[w].KLD /= float64(n[w])
			out[w].SameTop1 /= float64(n[w])
		}
		best := 0
		for s, v := range votes[w] {
			if v > best || (v == best && s < out[w].Sample) {
				best, out[w].Sample = v, s
			}
		}
		if w == 0 || out[w].KLD > worst.KLD {
			worst = out[w]
		}
	}
	return out, worst
}
