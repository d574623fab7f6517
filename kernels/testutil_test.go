package kernels

import (
	"math"
	"math/rand/v2"
)

func randF32(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

// naiveGemm returns C = A*B in float64 and the bound sum |a||b| per element,
// with A(i,p) = a(i,p) and B(p,j) = b(p,j) given as accessors.
func naiveGemm(m, n, k int, a func(i, p int) float64, b func(p, j int) float64) (c, mag []float64) {
	c = make([]float64, m*n)
	mag = make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s, g float64
			for p := range k {
				x := a(i, p) * b(p, j)
				s += x
				g += math.Abs(x)
			}
			c[i*n+j] = s
			mag[i*n+j] = g
		}
	}
	return c, mag
}

// maxScaledErr returns max |got-want| / (mag + tiny), i.e. the error in units
// of the sum of absolute products (the scale of the rounding error bound).
func maxScaledErr[T float](got []T, want, mag []float64) float64 {
	var e float64
	for i := range want {
		d := math.Abs(float64(got[i])-want[i]) / (mag[i] + 1e-30)
		if math.IsNaN(float64(got[i])) {
			return math.Inf(1)
		}
		e = max(e, d)
	}
	return e
}

// randSPD returns a random symmetric positive definite n x n matrix
// B B^T / n + 0.1 I with B n x n Gaussian.
func randSPD(r *rand.Rand, n int) []float64 {
	b := make([]float64, n*n)
	for i := range b {
		b[i] = r.NormFloat64()
	}
	a := make([]float64, n*n)
	for i := range n {
		for j := 0; j <= i; j++ {
			var s float64
			for p := range n {
				s += b[i*n+p] * b[j*n+p]
			}
			s /= float64(n)
			if i == j {
				s += 0.1
			}
			a[i*n+j], a[j*n+i] = s, s
		}
	}
	return a
}

func matMul64(a, b []float64, n int) []float64 {
	c := make([]float64, n*n)
	for i := range n {
		for p := range n {
			x := a[i*n+p]
			if x == 0 {
				continue
			}
			for j := range n {
				c[i*n+j] += x * b[p*n+j]
			}
		}
	}
	return c
}

func transpose64(a []float64, n int) []float64 {
	t := make([]float64, n*n)
	for i := range n {
		for j := range n {
			t[j*n+i] = a[i*n+j]
		}
	}
	return t
}

// maxAbsDiffIdentity returns max |a - I|.
func maxAbsDiffIdentity(a []float64, n int) float64 {
	var e float64
	for i := range n {
		for j := range n {
			want := 0.0
			if i == j {
				want = 1
			}
			e = max(e, math.Abs(a[i*n+j]-want))
		}
	}
	return e
}
