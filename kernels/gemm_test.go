package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

var gemmShapes = []struct{ m, n, k int }{
	{1, 1, 1}, {1, 7, 5}, {1, 3000, 40}, {2, 1, 9}, {5, 7, 1}, {3, 3, 3},
	{13, 17, 19}, {14, 32, 256}, {15, 33, 257}, {28, 64, 100},
	{29, 65, 300}, {64, 64, 64}, {100, 37, 513}, {47, 200, 31},
	{130, 150, 270}, {257, 96, 64}, {8, 1000, 40},
}

// withKernels runs f once per float32 micro-kernel this CPU supports.
func withKernels(t *testing.T, f func(t *testing.T)) {
	saved := sgemmKern
	defer func() { sgemmKern = saved }()
	for _, kern := range sgemmAll {
		sgemmKern = kern
		t.Run(kern.name, f)
	}
}

func TestMatMulNT(t *testing.T) {
	withKernels(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for _, s := range gemmShapes {
			a, b := randF32(r, s.m*s.k), randF32(r, s.n*s.k)
			c := randF32(r, s.m*s.n) // must be overwritten
			MatMulNT(c, a, b, s.m, s.n, s.k)
			want, mag := naiveGemm(s.m, s.n, s.k,
				func(i, p int) float64 { return float64(a[i*s.k+p]) },
				func(p, j int) float64 { return float64(b[j*s.k+p]) })
			// float32 sums: error within a few k*eps of sum |a||b|.
			if e := maxScaledErr(c, want, mag); e > 1e-6*float64(s.k+8) {
				t.Errorf("m=%d n=%d k=%d: scaled error %.3g", s.m, s.n, s.k, e)
			}
		}
	})
}

func TestMatMulNN(t *testing.T) {
	withKernels(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		for _, s := range gemmShapes {
			a, b := randF32(r, s.m*s.k), randF32(r, s.k*s.n)
			c := randF32(r, s.m*s.n)
			MatMulNN(c, a, b, s.m, s.n, s.k)
			want, mag := naiveGemm(s.m, s.n, s.k,
				func(i, p int) float64 { return float64(a[i*s.k+p]) },
				func(p, j int) float64 { return float64(b[p*s.n+j]) })
			if e := maxScaledErr(c, want, mag); e > 1e-6*float64(s.k+8) {
				t.Errorf("m=%d n=%d k=%d: scaled error %.3g", s.m, s.n, s.k, e)
			}
		}
	})
}

// TestGemmFloat64 checks each float64 kernel through the generic driver,
// including the transposed-A operand, alpha and accumulation.
func TestGemmFloat64(t *testing.T) {
	saved := dgemmKern
	defer func() { dgemmKern = saved }()
	for _, kern := range dgemmAll {
		t.Run(kern.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(5, 6))
			for _, s := range gemmShapes {
				a := make([]float64, s.m*s.k) // stored transposed: [k][m]
				b := make([]float64, s.n*s.k) // stored [n][k]
				c := make([]float64, s.m*s.n)
				for _, x := range [][]float64{a, b, c} {
					for i := range x {
						x[i] = r.NormFloat64()
					}
				}
				c0 := append([]float64(nil), c...)
				gemm(s.m, s.n, s.k, operand[float64]{a, s.m, true}, operand[float64]{b, s.k, true}, c, s.n, -2, true, kern)
				want, mag := naiveGemm(s.m, s.n, s.k,
					func(i, p int) float64 { return a[p*s.m+i] },
					func(p, j int) float64 { return b[j*s.k+p] })
				for i := range want {
					want[i] = c0[i] - 2*want[i]
					mag[i] = 2*mag[i] + 1
				}
				if e := maxScaledErr(c, want, mag); e > 1e-15*float64(s.k+8) {
					t.Errorf("m=%d n=%d k=%d: scaled error %.3g", s.m, s.n, s.k, e)
				}
			}
		})
	}
}

func TestMatVecNT(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, s := range []struct{ n, k int }{{1, 1}, {3, 7}, {17, 33}, {100, 1}, {64, 2048}, {3000, 130}} {
		b, x := randF32(r, s.n*s.k), randF32(r, s.k)
		y := randF32(r, s.n)
		MatVecNT(y, b, x, s.n, s.k)
		want, mag := naiveGemm(s.n, 1, s.k,
			func(i, p int) float64 { return float64(b[i*s.k+p]) },
			func(p, _ int) float64 { return float64(x[p]) })
		if e := maxScaledErr(y, want, mag); e > 1e-6*float64(s.k+8) {
			t.Errorf("n=%d k=%d: scaled error %.3g", s.n, s.k, e)
		}
		// m == 1 MatMulNT goes the same way.
		c := make([]float32, s.n)
		MatMulNT(c, x, b, 1, s.n, s.k)
		if e := maxScaledErr(c, want, mag); e > 1e-6*float64(s.k+8) {
			t.Errorf("MatMulNT m=1 n=%d k=%d: scaled error %.3g", s.n, s.k, e)
		}
	}
}

func TestMatMulPanicsOnShortSlice(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || fmt.Sprint(r) != "kernels: MatMulNT: len(b) = 5, shape needs 6" {
			t.Fatalf("panic = %v", r)
		}
	}()
	MatMulNT(make([]float32, 4), make([]float32, 6), make([]float32, 5), 2, 2, 3)
}

func TestSyrkAccumulate(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, s := range []struct{ t, k int }{{1, 1}, {3, 5}, {40, 300}, {600, 70}, {20, 600}, {129, 290}} {
		x := randF32(r, s.t*s.k)
		want, mag := naiveGemm(s.k, s.k, s.t,
			func(i, p int) float64 { return float64(x[p*s.k+i]) },
			func(p, j int) float64 { return float64(x[p*s.k+j]) })
		for i := range want {
			want[i]++
			mag[i]++
		}
		withKernels(t, func(t *testing.T) {
			h := make([]float64, s.k*s.k)
			for i := range h {
				h[i] = 1 // accumulates on top of what is there
			}
			SyrkAccumulate(h, x, s.t, s.k)
			if e := maxScaledErr(h, want, mag); e > 1e-6*float64(min(s.t, syrkChunk)+8) {
				t.Errorf("t=%d k=%d: scaled error %.3g", s.t, s.k, e)
			}
			for i := range s.k {
				for j := range i {
					if h[i*s.k+j] != h[j*s.k+i] {
						t.Fatalf("t=%d k=%d: h not symmetric at (%d,%d)", s.t, s.k, i, j)
					}
				}
			}
			// Lower-only accumulation plus one mirror gives the same matrix,
			// and leaves the upper triangle alone until then.
			lo := make([]float64, s.k*s.k)
			for i := range lo {
				lo[i] = 1
			}
			SyrkAccumulateLower(lo, x, s.t, s.k)
			for i := range s.k {
				for j := i + 1; j < s.k; j++ {
					if lo[i*s.k+j] != 1 {
						t.Fatalf("t=%d k=%d: SyrkAccumulateLower wrote upper (%d,%d)", s.t, s.k, i, j)
					}
				}
			}
			SymmetrizeLower(lo, s.k)
			for i := range lo {
				if lo[i] != h[i] {
					t.Fatalf("t=%d k=%d: lower+mirror differs from full at %d: %g vs %g", s.t, s.k, i, lo[i], h[i])
				}
			}
		})
	}
}

// TestSgemmStrided checks the BLAS-style entry on sub-matrices of larger
// buffers, all four transpose combinations, alpha and beta, and that
// elements outside C's window are untouched.
func TestSgemmStrided(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for _, s := range []struct{ m, n, k int }{{1, 5, 3}, {17, 33, 40}, {64, 100, 300}, {150, 70, 20}} {
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			for _, ab := range [][2]float32{{1, 0}, {-0.5, 1}, {2, 0.25}} {
				alpha, beta := ab[0], ab[1]
				ar, ac := s.m, s.k
				if tr[0] {
					ar, ac = s.k, s.m
				}
				br, bc := s.k, s.n
				if tr[1] {
					br, bc = s.n, s.k
				}
				lda, ldb, ldc := ac+3, bc+5, s.n+7
				a := randF32(r, ar*lda)
				b := randF32(r, br*ldb)
				c := randF32(r, s.m*ldc)
				c0 := append([]float32(nil), c...)
				Sgemm(tr[0], tr[1], s.m, s.n, s.k, alpha, a, lda, b, ldb, beta, c, ldc)
				at := func(i, p int) float64 {
					if tr[0] {
						return float64(a[p*lda+i])
					}
					return float64(a[i*lda+p])
				}
				bt := func(p, j int) float64 {
					if tr[1] {
						return float64(b[j*ldb+p])
					}
					return float64(b[p*ldb+j])
				}
				want, mag := naiveGemm(s.m, s.n, s.k, at, bt)
				got := make([]float32, s.m*s.n)
				for i := range s.m {
					for j := range s.n {
						x := i*s.n + j
						want[x] = float64(alpha)*want[x] + float64(beta)*float64(c0[i*ldc+j])
						mag[x] = float64(abs32(alpha))*mag[x] + float64(abs32(beta)*abs32(c0[i*ldc+j]))
						got[x] = c[i*ldc+j]
					}
					for j := s.n; j < ldc && i*ldc+j < len(c); j++ {
						if c[i*ldc+j] != c0[i*ldc+j] {
							t.Fatalf("%v %v: element (%d,%d) outside C was written", s, tr, i, j)
						}
					}
				}
				if e := maxScaledErr(got, want, mag); e > 1e-6*float64(s.k+8) {
					t.Errorf("%v trans=%v alpha=%g beta=%g: scaled error %.3g", s, tr, alpha, beta, e)
				}
			}
		}
	}
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

func TestDgemmBetaZeroIgnoresNaN(t *testing.T) {
	a := []float64{1, 2, 3, 4}
	c := []float64{math.NaN(), math.NaN(), math.NaN(), math.NaN()}
	Dgemm(false, false, 2, 2, 2, 1, a, 2, a, 2, 0, c, 2)
	want := []float64{7, 10, 15, 22}
	for i := range c {
		if c[i] != want[i] {
			t.Fatalf("c = %v, want %v", c, want)
		}
	}
}
