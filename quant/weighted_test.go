package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestWeightedSearch: on groups with outliers and importances spread as
// e^N(0,2), the weighted searches' weighted error is never above the
// plain rule's nor the unweighted search's, is below the unweighted
// search's on most groups, and with equal importances they find a
// parameter of the same error as the unweighted search.
func TestWeightedSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const groups, gs = 400, 64
	better := map[string]int{}
	for range groups {
		w, h, ones := make([]float32, gs), make([]float32, gs), make([]float32, gs)
		for j := range w {
			w[j] = float32(rng.NormFloat64() * 0.02)
			if rng.IntN(16) == 0 {
				w[j] *= 6
			}
			h[j] = float32(math.Exp(2 * rng.NormFloat64()))
			ones[j] = 1
		}
		for _, dt := range []ScaleDType{ScaleF16, ScaleBF16} {
			// symmetric
			plain, un, wt := Sym4Absmax(w, dt).Scale, Sym4Search(w, dt).Scale, Sym4SearchWeighted(w, h, dt).Scale
			ep, eu, ew := symErrWeighted(w, h, plain), symErrWeighted(w, h, un), symErrWeighted(w, h, wt)
			if ew > ep*(1+1e-9) || ew > eu*(1+1e-9) {
				t.Fatalf("sym %v: weighted error %g above plain %g or unweighted search %g", dt, ew, ep, eu)
			}
			if ew < eu*(1-1e-6) {
				better["sym"]++
			}
			if e1, e0 := symErrWeighted(w, ones, Sym4SearchWeighted(w, ones, dt).Scale), symErrWeighted(w, ones, un); math.Abs(e1-e0) > 1e-6*e0 {
				t.Fatalf("sym %v, equal importances: error %g, unweighted search %g", dt, e1, e0)
			}
			// asymmetric
			ap, au, aw := Asym4MinMax(w, dt), Asym4Search(w, dt), Asym4SearchWeighted(w, h, dt)
			ep, eu, ew = asymErrWeighted(w, h, ap), asymErrWeighted(w, h, au), asymErrWeighted(w, h, aw)
			if ew > ep*(1+1e-9) || ew > eu*(1+1e-9) {
				t.Fatalf("asym %v: weighted error %g above plain %g or unweighted search %g", dt, ew, ep, eu)
			}
			if ew < eu*(1-1e-6) {
				better["asym"]++
			}
		}
	}
	t.Logf("groups where the weighted search beats the unweighted one under the importances (of %d): %v", 2*groups, better)
	for _, k := range []string{"sym", "asym"} {
		if better[k] < groups {
			t.Errorf("%s: weighted search better on only %d of %d groups", k, better[k], 2*groups)
		}
	}
}

// TestWeightedSearchDegenerate: all-zero importances, a NaN or a
// negative importance fall back to the plain rule; a zero group too.
func TestWeightedSearchDegenerate(t *testing.T) {
	w := []float32{0.1, -0.2, 0.3, 0.05}
	for _, h := range [][]float32{{0, 0, 0, 0}, {1, float32(math.NaN()), 1, 1}, {1, -1, 1, 1}} {
		if got, want := Sym4SearchWeighted(w, h, ScaleF16), Sym4Absmax(w, ScaleF16); got != want {
			t.Errorf("importances %v: %v, want the plain rule %v", h, got, want)
		}
		if got, want := Asym4SearchWeighted(w, h, ScaleBF16), Asym4MinMax(w, ScaleBF16); got != want {
			t.Errorf("importances %v: %v, want the plain rule %v", h, got, want)
		}
	}
	zero := make([]float32, 4)
	if got, want := Sym4SearchWeighted(zero, []float32{1, 1, 1, 1}, ScaleF16), Sym4Absmax(zero, ScaleF16); got != want {
		t.Errorf("zero group: %v, want %v", got, want)
	}
}
