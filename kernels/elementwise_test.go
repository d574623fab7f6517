package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestDotAxpyMul(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, n := range []int{0, 1, 7, 8, 9, 31, 64, 100, 1001} {
		a, b := randF32(r, n), randF32(r, n)
		var want, mag float64
		for i := range a {
			want += float64(a[i]) * float64(b[i])
			mag += math.Abs(float64(a[i]) * float64(b[i]))
		}
		if got := Dot(a, b); math.Abs(float64(got)-want) > 1e-6*float64(n+8)*(mag+1e-30) {
			t.Errorf("Dot n=%d: %g, want %g", n, got, want)
		}
		y := append([]float32(nil), b...)
		Axpy(0.5, a, y)
		for i := range y {
			if y[i] != b[i]+0.5*a[i] {
				t.Fatalf("Axpy n=%d at %d: %g", n, i, y[i])
			}
		}
		y = append([]float32(nil), b...)
		Mul(y, a)
		for i := range y {
			if y[i] != b[i]*a[i] {
				t.Fatalf("Mul n=%d at %d: %g", n, i, y[i])
			}
		}
	}
}

func TestRMSNorm(t *testing.T) {
	x := []float32{1, 2, 3, 4, -1, -1, -1, -1}
	w := []float32{1, 0.5, 2, 1}
	out := make([]float32, len(x))
	RMSNorm(out, x, w, 1e-6)
	inv := 1 / math.Sqrt(30.0/4+1e-6)
	inv2 := 1 / math.Sqrt(1+1e-6)
	want := []float64{1 * inv, 2 * inv * 0.5, 3 * inv * 2, 4 * inv, -inv2, -inv2 * 0.5, -inv2 * 2, -inv2}
	for i := range out {
		if math.Abs(float64(out[i])-want[i]) > 1e-6 {
			t.Errorf("RMSNorm[%d] = %g, want %g", i, out[i], want[i])
		}
	}
	RMSNorm(x, x, w, 1e-6) // in place
	for i := range x {
		if x[i] != out[i] {
			t.Errorf("in-place RMSNorm[%d] = %g, want %g", i, x[i], out[i])
		}
	}
}

func TestSoftmax(t *testing.T) {
	x := []float32{1, 2, 3, 1000}
	Softmax(x)
	if x[3] != 1 || x[0] != 0 {
		t.Errorf("large logit: %v", x)
	}
	y := []float32{0, float32(math.Log(3)), 0}
	Softmax(y)
	for i, want := range []float64{0.2, 0.6, 0.2} {
		if math.Abs(float64(y[i])-want) > 1e-7 {
			t.Errorf("Softmax[%d] = %g, want %g", i, y[i], want)
		}
	}
	Softmax(nil)
}

func TestGELUErfSigmoid(t *testing.T) {
	// Reference values of 0.5*x*(1+erf(x/sqrt 2)) and 1/(1+e^-x).
	g := []float32{-3, -1, 0, 0.5, 1, 3}
	wantG := []float64{-0.00404969409489031, -0.15865525393145707, 0, 0.34573123063700656, 0.8413447460685429, 2.99595030590511}
	GELUErf(g)
	for i := range g {
		if math.Abs(float64(g[i])-wantG[i]) > 2e-7*math.Max(1, math.Abs(wantG[i])) {
			t.Errorf("GELUErf[%d] = %.9g, want %.9g", i, g[i], wantG[i])
		}
	}
	s := []float32{-2, 0, 2}
	wantS := []float64{0.11920292202211755, 0.5, 0.8807970779778823}
	Sigmoid(s)
	for i := range s {
		if math.Abs(float64(s[i])-wantS[i]) > 1e-7 {
			t.Errorf("Sigmoid[%d] = %.9g, want %.9g", i, s[i], wantS[i])
		}
	}
}

func TestParallelCoversRange(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 17, 1000} {
		seen := make([]int32, n)
		Parallel(n, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				seen[i]++
			}
		})
		for i, c := range seen {
			if c != 1 {
				t.Fatalf("n=%d: index %d visited %d times", n, i, c)
			}
		}
	}
}
