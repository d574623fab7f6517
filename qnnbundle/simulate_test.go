package qnnbundle

import (
	"math"
	"testing"

	"sparkconv/quant"
)

// TestPosSNR: every position weighs the same whatever its norm (a sink's
// residual is thousands of times an ordinary token's), the worst position
// is named, and an exact reproduction is +Inf.
func TestPosSNR(t *testing.T) {
	for _, c := range []struct {
		name  string
		stats []quant.ErrStats // per position
		want  float64          // dB
		worst float64
		pos   int
	}{
		{"equal weight", []quant.ErrStats{{SumSq: 1e8, SumErrSq: 1e4}, {SumSq: 1, SumErrSq: 0.1}}, -10 * math.Log10((1e-4+0.1)/2), 10, 1},
		{"one position", []quant.ErrStats{{SumSq: 4, SumErrSq: 0.004}}, 30, 30, 0},
		{"exact", []quant.ErrStats{{SumSq: 4}, {SumSq: 2}}, math.Inf(1), math.Inf(1), 0},
	} {
		var a posSNR
		for p, s := range c.stats {
			a.add(p, s)
		}
		got, worst := float64(a.db()), -10*math.Log10(a.worst)
		if math.Abs(got-c.want) > 1e-9 && !(math.IsInf(got, 1) && math.IsInf(c.want, 1)) {
			t.Errorf("%s: %v dB, want %v", c.name, got, c.want)
		}
		if (math.Abs(worst-c.worst) > 1e-9 && !(math.IsInf(worst, 1) && math.IsInf(c.worst, 1))) || a.worstPos != c.pos {
			t.Errorf("%s: worst %v dB at %d, want %v at %d", c.name, worst, a.worstPos, c.worst, c.pos)
		}
	}
}
