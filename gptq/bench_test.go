package gptq

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"

	"sparkconv/convert"
	"sparkconv/kernels"
	"sparkconv/quant"
)

// benchHessian is a positive definite [k, k] Hessian X^T X + k*I from a
// rank-64 X: what the solve costs does not depend on H's contents.
func benchHessian(k int) []float64 {
	rng := rand.New(rand.NewPCG(uint64(k), 3))
	x := make([]float32, 64*k)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	h := make([]float64, k*k)
	kernels.SyrkAccumulate(h, x, 64, k)
	for i := range k {
		h[i*k+i] += float64(k)
	}
	return h
}

func benchWeights(n, k int) []float32 {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(k)))
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * 0.02)
	}
	return w
}

// solveFLOPs is the arithmetic of one GPTQ solve of W [n, k]: the
// error updates (2 n k^2 / 2: each column's error pushed into the later
// columns) and the factor of H^-1 (a Cholesky and a triangular inverse,
// 2 k^3 / 3).
func solveFLOPs(n, k int, factor bool) float64 {
	f := float64(n) * float64(k) * float64(k)
	if factor {
		f += 2 * float64(k) * float64(k) * float64(k) / 3
	}
	return f
}

// BenchmarkSolve is the GPTQ solve alone at Spark's shapes, symmetric int4
// g128 with the MSE search (the gptq command): Prepare (factor of H^-1,
// once per distinct input) and Solve, in GFLOP per wall second and per
// CPU second (the machine is shared: the CPU-second figure does not
// depend on how busy it is).
func BenchmarkSolve(b *testing.B) {
	shapes := []struct {
		name string
		n, k int
	}{
		{"q_k_v_proj", 3080, 2048}, {"o_proj", 2048, 2048}, {"gate_proj", 6656, 2048},
		{"down_proj", 2048, 6656}, {"lm_head", 131072, 2048},
	}
	g := Grid{Kind: convert.GridSym4, Group: 128, DType: quant.ScaleF16, Search: true}
	// The machine's float64 GEMM rate right now, on the shape of one
	// block's update (a 4096-row panel, K = 2048): the ceiling the solve's
	// GFLOP/s is to be read against on a shared machine.
	b.Run("dgemm_4096x1920x128", func(b *testing.B) {
		a, bb, c := make([]float64, 4096*128), make([]float64, 128*1920), make([]float64, 4096*1920)
		for i := range a {
			a[i] = float64(i%7) - 3
		}
		for i := range bb {
			bb[i] = float64(i%5) - 2
		}
		c0 := cpuSeconds()
		for b.Loop() {
			kernels.Dgemm(false, false, 4096, 1920, 128, -1, a, 128, bb, 1920, 1, c, 1920)
		}
		fl := float64(b.N) * 2 * 4096 * 1920 * 128
		b.ReportMetric(fl/1e9/b.Elapsed().Seconds(), "GFLOP/s")
		b.ReportMetric(fl/1e9/(cpuSeconds()-c0), "GFLOP/cpu-s")
	})
	for _, sh := range shapes {
		h := benchHessian(sh.k)
		w := benchWeights(sh.n, sh.k)
		m := quant.F32Matrix(sh.n, sh.k, w)
		b.Run(fmt.Sprintf("%s_%dx%d/prepare", sh.name, sh.n, sh.k), func(b *testing.B) {
			var f Factor
			c0 := cpuSeconds()
			for b.Loop() {
				if err := Prepare(&f, h, sh.k, DefaultDamp, false); err != nil {
					b.Fatal(err)
				}
			}
			fl := float64(b.N) * (2 * float64(sh.k) * float64(sh.k) * float64(sh.k) / 3)
			b.ReportMetric(fl/1e9/b.Elapsed().Seconds(), "GFLOP/s")
			b.ReportMetric(fl/1e9/(cpuSeconds()-c0), "GFLOP/cpu-s")
		})
		for _, act := range []bool{false, true} {
			var f Factor
			if err := Prepare(&f, h, sh.k, DefaultDamp, act); err != nil {
				b.Fatal(err)
			}
			name := "solve"
			if act {
				name = "solve-act-order"
			}
			b.Run(fmt.Sprintf("%s_%dx%d/%s", sh.name, sh.n, sh.k, name), func(b *testing.B) {
				var r Result
				setPhase("solve") // -tagfocus gptq=solve: the solve without the setup
				defer setPhase("")
				c0 := cpuSeconds()
				for b.Loop() {
					if err := Solve(&r, m, &f, g); err != nil {
						b.Fatal(err)
					}
				}
				fl := float64(b.N) * solveFLOPs(sh.n, sh.k, false)
				b.ReportMetric(fl/1e9/b.Elapsed().Seconds(), "GFLOP/s")
				b.ReportMetric(fl/1e9/(cpuSeconds()-c0), "GFLOP/cpu-s")
			})
		}
	}
}

// cpuSeconds is this process's user+system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
