package qnn

import (
	"math"
	"math/rand/v2"
	"testing"
)

// searchCase is a MatMul weight [k, n] with heavy-tailed entries and the
// Σ x xᵀ of inputs whose channels carry very different energy (a few
// outlier channels at 20x), the case the H-weighted search is for.
func searchCase(k, n, rows int, seed uint64) ([]float32, []float64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	w := make([]float32, k*n)
	for i := range w {
		v := rng.NormFloat64()
		if rng.IntN(40) == 0 {
			v *= 6 // weight outliers: the absmax grid stretches to them
		}
		w[i] = float32(v)
	}
	gain := make([]float64, k)
	for c := range gain {
		gain[c] = 0.2 + rng.Float64()
		if c%16 == 3 {
			gain[c] = 20 // outlier input channels
		}
	}
	h := make([]float64, k*k)
	x := make([]float64, k)
	for range rows {
		for c := range x {
			x[c] = gain[c] * rng.NormFloat64()
		}
		for a := range k {
			for b := range k {
				h[a*k+b] += x[a] * x[b]
			}
		}
	}
	return w, h
}

func column(w []float32, k, n, j int) []float32 {
	out := make([]float32, k)
	for r := range k {
		out[r] = w[r*n+j]
	}
	return out
}

func TestSearchScales(t *testing.T) {
	const k, n = 64, 24
	w, h := searchCase(k, n, 256, 7)
	absmax := ParamAbsMax(w, []int64{k, n}, 1)
	r := SearchScales(w, k, n, h, 4)
	base := WeightedErr(w, k, n, h, 4, absmax)
	got := WeightedErr(w, k, n, h, 4, r.Clip)
	if rel := math.Abs(r.AbsmaxErr-base) / base; rel > 1e-9 {
		t.Fatalf("search's absmax error %g, measured directly %g", r.AbsmaxErr, base)
	}
	if rel := math.Abs(r.Err-got) / got; rel > 1e-9 {
		t.Fatalf("search's chosen error %g, measured directly %g", r.Err, got)
	}
	// The chosen grids cut the output error well below absmax's.
	if ratio := got / base; math.Abs(ratio-0.350) > 0.002 {
		t.Fatalf("H-weighted error %g, absmax %g: ratio %.4f, want 0.350 (65 %% lower)", got, base, ratio)
	}
	t.Logf("H-weighted error: absmax %.4g, searched %.4g (%.1f %%)", base, got, 100*got/base)
	for j := range n {
		c := column(w, k, n, j)
		a := WeightedErr(c, k, 1, h, 4, absmax[j:j+1])
		b := WeightedErr(c, k, 1, h, 4, r.Clip[j:j+1])
		if b > a*(1+1e-12) {
			t.Errorf("channel %d: searched error %g above absmax's %g", j, b, a)
		}
		if ratio := r.Clip[j] / absmax[j]; ratio < 0.5-1e-12 || ratio > 1 {
			t.Errorf("channel %d: clip ratio %g outside [0.5, 1]", j, ratio)
		}
	}
}

// An all-zero channel and no calibration energy keep the absmax grid.
func TestSearchScalesDegenerate(t *testing.T) {
	const k, n = 8, 3
	w := make([]float32, k*n)
	for r := range k {
		w[r*n+1] = float32(r) - 3.5
	}
	r := SearchScales(w, k, n, make([]float64, k*k), 4)
	absmax := ParamAbsMax(w, []int64{k, n}, 1)
	for j := range n {
		if r.Clip[j] != absmax[j] {
			t.Errorf("channel %d: clip %g, want absmax %g", j, r.Clip[j], absmax[j])
		}
	}
	if r.Err != 0 || r.AbsmaxErr != 0 {
		t.Errorf("errors %g, %g with H = 0", r.Err, r.AbsmaxErr)
	}
}

// BenchmarkSearchScales is one down_proj of SmolLM2-135M (K 1536, N 576),
// the widest MatMul input of the real model's layers.
func BenchmarkSearchScales(b *testing.B) {
	const k, n = 1536, 576
	rng := rand.New(rand.NewPCG(1, 2))
	w := make([]float32, k*n)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	h := make([]float64, k*k)
	for i := range k {
		h[i*k+i] = 1 + rng.Float64()
	}
	b.ResetTimer()
	for range b.N {
		SearchScales(w, k, n, h, 4)
	}
}
