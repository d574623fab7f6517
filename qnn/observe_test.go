package qnn

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestObserve holds Ranges.Observe to math.Min and math.Max over every
// value, for every length around the four lanes, a NaN anywhere, and a
// range widened across calls.
func TestObserve(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 19; n++ {
		for at := -1; at < n; at++ {
			data := make([]float32, n)
			for i := range data {
				data[i] = float32(rng.NormFloat64() * 3)
			}
			if at >= 0 {
				data[at] = float32(math.NaN())
			}
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, v := range data {
				lo, hi = math.Min(lo, float64(v)), math.Max(hi, float64(v))
			}
			r := Ranges{}
			r.Observe("x", data)
			got := r["x"]
			if at >= 0 {
				if !math.IsNaN(got[0]) || !math.IsNaN(got[1]) {
					t.Fatalf("n %d, NaN at %d: range %v, want NaN", n, at, got)
				}
				continue
			}
			if got != [2]float64{lo, hi} {
				t.Fatalf("n %d: range %v, want [%g %g]", n, got, lo, hi)
			}
		}
	}
	r := Ranges{}
	r.Observe("x", []float32{-1, 2})
	r.Observe("x", []float32{0.5})
	r.Observe("x", nil)
	r.Observe("x", []float32{3, -0.5})
	if r["x"] != [2]float64{-1, 3} {
		t.Fatalf("widened range %v, want [-1 3]", r["x"])
	}
}

// BenchmarkObserve is calibration's per-value cost: the range of a
// decode-step activation of the 1.7B shape's MLP (8192 values) per call.
func BenchmarkObserve(b *testing.B) {
	data := make([]float32, 8192)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		data[i] = float32(rng.NormFloat64())
	}
	r := Ranges{}
	b.SetBytes(int64(4 * len(data)))
	for b.Loop() {
		r.Observe("mlp_act", data)
	}
}
