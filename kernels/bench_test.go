package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// Spark layer prefill shapes at T = 512: q/k/v/g (n=3072 fused), o_proj and
// down_proj's k, gate/up (n=6656).
var benchShapes = []struct{ m, n, k int }{
	{512, 2048, 2048}, {512, 3072, 2048}, {512, 6656, 2048}, {512, 2048, 6656},
}

// reportGFLOPs reports wall-clock GFLOP/s and, since the machine may be
// shared, GFLOP per CPU-second of this process (cpu0 = processCPU() taken
// before the timed loop).
func reportGFLOPs(b *testing.B, flops float64, cpu0 time.Duration) {
	total := flops * float64(b.N) / 1e9
	b.ReportMetric(total/b.Elapsed().Seconds(), "GFLOP/s")
	// rusage is too coarse for runs of a few milliseconds.
	if cpu := processCPU() - cpu0; cpu > 0 && b.Elapsed() > 50*time.Millisecond {
		b.ReportMetric(total/cpu.Seconds(), "GFLOP/CPU-s")
	}
}

func BenchmarkMatMulNT(b *testing.B) {
	for _, s := range benchShapes {
		b.Run(fmt.Sprintf("m%d_n%d_k%d", s.m, s.n, s.k), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			x, w := randF32(r, s.m*s.k), randF32(r, s.n*s.k)
			c := make([]float32, s.m*s.n)
			MatMulNT(c, x, w, s.m, s.n, s.k) // warm-up: page faults, pools
			cpu0 := processCPU()
			for b.Loop() {
				MatMulNT(c, x, w, s.m, s.n, s.k)
			}
			reportGFLOPs(b, 2*float64(s.m)*float64(s.n)*float64(s.k), cpu0)
		})
	}
}

func BenchmarkMatMulNN(b *testing.B) {
	s := benchShapes[0]
	r := rand.New(rand.NewPCG(1, 1))
	x, w := randF32(r, s.m*s.k), randF32(r, s.n*s.k)
	c := make([]float32, s.m*s.n)
	cpu0 := processCPU()
	for b.Loop() {
		MatMulNN(c, x, w, s.m, s.n, s.k)
	}
	reportGFLOPs(b, 2*float64(s.m)*float64(s.n)*float64(s.k), cpu0)
}

func BenchmarkMatVecNT(b *testing.B) {
	for _, s := range []struct{ n, k int }{{2048, 2048}, {6656, 2048}, {2048, 6656}} {
		b.Run(fmt.Sprintf("n%d_k%d", s.n, s.k), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			w, x := randF32(r, s.n*s.k), randF32(r, s.k)
			y := make([]float32, s.n)
			b.SetBytes(int64(4 * s.n * s.k))
			cpu0 := processCPU()
			for b.Loop() {
				MatVecNT(y, w, x, s.n, s.k)
			}
			if cpu := processCPU() - cpu0; cpu > 0 {
				b.ReportMetric(float64(4*s.n*s.k)*float64(b.N)/cpu.Seconds()/1e9, "GB/CPU-s")
			}
		})
	}
}

func BenchmarkSyrkAccumulate(b *testing.B) {
	for _, k := range []int{2048, 6656} {
		b.Run(fmt.Sprintf("t512_k%d", k), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			x := randF32(r, 512*k)
			h := make([]float64, k*k)
			// Warm-up: first-touch page faults of h are slow on this VM and
			// are not what repeated calibration calls pay.
			SyrkAccumulate(h, x, 512, k)
			cpu0 := processCPU()
			for b.Loop() {
				SyrkAccumulate(h, x, 512, k)
			}
			// Useful work: the k*(k+1)/2 distinct entries.
			reportGFLOPs(b, 512*float64(k)*float64(k+1), cpu0)
		})
	}
}

func BenchmarkSyrkAccumulateLower(b *testing.B) {
	for _, k := range []int{2048, 6656} {
		b.Run(fmt.Sprintf("t512_k%d", k), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			x := randF32(r, 512*k)
			h := make([]float64, k*k)
			SyrkAccumulateLower(h, x, 512, k) // warm-up (first-touch faults)
			cpu0 := processCPU()
			for b.Loop() {
				SyrkAccumulateLower(h, x, 512, k)
			}
			reportGFLOPs(b, 512*float64(k)*float64(k+1), cpu0)
		})
	}
}

func benchSPD(n int) []float64 {
	r := rand.New(rand.NewPCG(2, 2))
	x := randF32(r, 2*n*n/2+n)
	h := make([]float64, n*n)
	SyrkAccumulate(h, x, len(x)/n, n)
	for i := range n {
		h[i*n+i] += 1
	}
	return h
}

func BenchmarkCholesky(b *testing.B) {
	benchFactor(b, Cholesky, 1.0/3)
}

func BenchmarkCholeskyUpperInverse(b *testing.B) {
	benchFactor(b, CholeskyUpperInverse, 2.0/3)
}

// benchFactor times factor on SPD matrices of Spark's Hessian sizes,
// counting flopsPerCube * n^3 floating-point operations a call.
func benchFactor(b *testing.B, factor func([]float64, int) error, flopsPerCube float64) {
	for _, n := range []int{2048, 6656} {
		b.Run(fmt.Sprintf("n%d", n), func(b *testing.B) {
			if n > 2048 && testing.Short() {
				b.Skip("short")
			}
			h := benchSPD(n)
			a := make([]float64, n*n)
			copy(a, h) // first touch outside the timing
			cpu0 := processCPU()
			for b.Loop() {
				copy(a, h)
				if err := factor(a, n); err != nil {
					b.Fatal(err)
				}
			}
			reportGFLOPs(b, flopsPerCube*float64(n)*float64(n)*float64(n), cpu0)
		})
	}
}

// BenchmarkSymmetrizeLower times the mirror that finishes each Hessian,
// in MB of the upper triangle written a second.
func BenchmarkSymmetrizeLower(b *testing.B) {
	for _, n := range []int{2048, 6656} {
		b.Run(fmt.Sprintf("n%d", n), func(b *testing.B) {
			a := make([]float64, n*n)
			for i := range a {
				a[i] = float64(i % 17)
			}
			b.SetBytes(int64(n) * int64(n-1) / 2 * 8)
			for b.Loop() {
				SymmetrizeLower(a, n)
			}
		})
	}
}
