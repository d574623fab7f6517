package eval

import (
	"math"
	"testing"
)

func TestSpans(t *testing.T) {
	for _, c := range []struct {
		name         string
		counts       []int
		sep, total   int
		starts, ends []int
	}{
		{"exact", []int{10, 20, 5}, 1, 37, []int{0, 11, 32}, []int{10, 31, 37}},
		{"merged boundary", []int{10, 10}, 2, 21, []int{0, 11}, []int{9, 21}},
		{"one sample", []int{100}, 1, 100, []int{0}, []int{100}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sp := spans(c.counts, make([]string, len(c.counts)), c.sep, c.total)
			for i, s := range sp {
				if s.Start != c.starts[i] || s.End != c.ends[i] || s.Sample != i+1 {
					t.Errorf("span %d = %+v, want [%d, %d) sample %d", i, s, c.starts[i], c.ends[i], i+1)
				}
			}
		})
	}
}

func TestSampleOf(t *testing.T) {
	sp := []Span{{Sample: 1, Start: 0, End: 10}, {Sample: 2, Start: 11, End: 31}, {Sample: 3, Start: 32, End: 37}}
	for p, want := range map[int]int{0: 1, 9: 1, 10: 0, 11: 2, 30: 2, 31: 0, 32: 3, 36: 3, 37: 0, -1: 0} {
		if got := sampleOf(sp, p); got != want {
			t.Errorf("sampleOf(%d) = %d, want %d", p, got, want)
		}
	}
}

// TestBySampleAndWindow scores two windows of 8 tokens over two samples:
// the second sample's tokens carry the high KLD, so it is the worst sample
// and window 1, which lies in it, the worst window.
func TestBySampleAndWindow(t *testing.T) {
	const ctx = 8
	sp := []Span{{Sample: 1, Start: 0, End: 7}, {Sample: 2, Start: 7, End: 16}}
	var toks []Token
	for w := range 2 {
		for pos := 4; pos < 7; pos++ {
			kld := 0.01
			if w*ctx+pos >= 7 {
				kld = 0.5
			}
			toks = append(toks, Token{KLD: kld, SameTop1: kld < 0.1, NLL: 2 + kld, NLLBase: 2, Pos: pos, Window: w})
		}
	}
	by, worst := BySample(toks, sp, ctx)
	if len(by) != 2 || by[0].Tokens != 3 || by[1].Tokens != 3 {
		t.Fatalf("by sample %+v", by)
	}
	if math.Abs(by[0].KLD-0.01) > 1e-12 || math.Abs(by[1].KLD-0.5) > 1e-12 || by[1].SameTop1 != 0 || by[0].SameTop1 != 1 {
		t.Errorf("by sample %+v", by)
	}
	if math.Abs(by[1].PPLRatio-math.Exp(0.5)) > 1e-12 {
		t.Errorf("sample 2 PPL ratio %g, want e^0.5", by[1].PPLRatio)
	}
	if worst != nil {
		t.Errorf("worst sample %+v from 3 tokens each: want none under MinSampleTokens", worst)
	}
	wins, ww := ByWindow(toks, 2, sp, ctx)
	if ww.Window != 1 || ww.Sample != 2 || math.Abs(ww.KLD-0.5) > 1e-12 {
		t.Errorf("worst window %+v, want window 1 in sample 2 at 0.5", ww)
	}
	if wins[0].Sample != 1 || math.Abs(wins[0].KLD-0.01) > 1e-12 {
		t.Errorf("window 0 %+v", wins[0])
	}
	// Enough tokens: the worst sample is named.
	var many []Token
	for i := range MinSampleTokens {
		many = append(many, Token{KLD: 0.2, Pos: i % ctx, Window: 1})
	}
	if _, w := BySample(append(toks, many...), sp, ctx); w == nil || w.Sample != 2 {
		t.Errorf("worst sample %+v, want sample 2", w)
	}
}
