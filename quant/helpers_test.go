package quant

import (
	"math"
	"math/rand/v2"
)

// realistic returns W[n, k] ~ N(0, 0.02) with a few input columns (k)
// scaled by 10..50, the outlier pattern of LLM linear layers, as bf16 bits
// and as the float32 values those bits hold.
func realistic(n, k int, seed uint64) ([]uint16, []float32) {
	r := rand.New(rand.NewPCG(seed, 7))
	cols := make(map[int]float64)
	for len(cols) < 6 {
		cols[r.IntN(k)] = 10 + 40*r.Float64()
	}
	b := make([]uint16, n*k)
	f := make([]float32, n*k)
	for i := range b {
		v := r.NormFloat64() * 0.02
		if s, ok := cols[i%k]; ok {
			v *= s
		}
		b[i] = f32ToBF16(float32(v))
		f[i] = bf16ToF32(b[i])
	}
	return b, f
}

// gaussian returns n values ~ N(0, sigma) rounded to bf16.
func gaussian(n int, sigma float64, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 11))
	f := make([]float32, n)
	for i := range f {
		f[i] = bf16ToF32(f32ToBF16(float32(r.NormFloat64() * sigma)))
	}
	return f
}

// sqErr is Σ (w - v)² in float64 with exact differences.
func sqErr(w, v []float32) float64 {
	var e float64
	for i := range w {
		d := float64(w[i]) - float64(v[i])
		e += d * d
	}
	return e
}

func sumSq(w []float32) float64 {
	var s float64
	for _, x := range w {
		s += float64(x) * float64(x)
	}
	return s
}

func db(sig, noise float64) float64 { return 10 * math.Log10(sig/noise) }
