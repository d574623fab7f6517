package rotate

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestChooseAlpha: on a down_proj input with one massive channel (what a
// real model's attention sink puts there) smoothing wins over none, and
// the chosen alpha's error is the lowest of the candidates; on an input
// without outliers no smoothing is within a few percent of the best.
func TestChooseAlpha(t *testing.T) {
	const T, k, n = 64, 128, 32
	rng := rand.New(rand.NewPCG(1, 2))
	mk := func(outlier float32) ([]float32, []float64, []float32) {
		x := make([]float32, T*k)
		amax := make([]float64, k)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
			if i%k == 5 && i/k%4 == 0 {
				x[i] *= outlier
			}
			amax[i%k] = max(amax[i%k], math.Abs(float64(x[i])))
		}
		w := make([]float32, n*k)
		for i := range w {
			w[i] = float32(rng.NormFloat64() * 0.05)
		}
		return x, amax, w
	}
	for _, c := range []struct {
		name    string
		outlier float32
		smooths bool // the choice must smooth
	}{{"outlier", 2000, true}, {"plain", 1, false}} {
		x, amax, w := mk(c.outlier)
		ch := chooseAlpha(x, amax, w, k)
		best := math.Inf(1)
		for _, e := range ch.errs {
			best = min(best, e)
		}
		i := 0
		for AutoAlphas[i] != ch.alpha {
			i++
		}
		if ch.errs[i] != best || !(best > 0) {
			t.Errorf("%s: chose %g (error %g), best candidate error %g", c.name, ch.alpha, ch.errs[i], best)
		}
		if c.smooths && (ch.alpha == 0 || ch.errs[0] < 2*best) {
			t.Errorf("%s: alpha %g, errors %v: smoothing should win by far", c.name, ch.alpha, ch.errs)
		}
		if !c.smooths && ch.errs[0] > 1.2*best {
			t.Errorf("%s: no smoothing %g vs best %g", c.name, ch.errs[0], best)
		}
		if len(ch.s) != k {
			t.Errorf("%s: %d scales", c.name, len(ch.s))
		}
	}
}
