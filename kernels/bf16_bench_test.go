package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkMatMulNTBF16 is BenchmarkMatMulNT with the weight in bf16,
// widened inside the B-panel packing (Spark's prefill shapes at T = 512).
func BenchmarkMatMulNTBF16(b *testing.B) {
	for _, s := range benchShapes {
		b.Run(fmt.Sprintf("m%d_n%d_k%d", s.m, s.n, s.k), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			x := randF32(r, s.m*s.k)
			w, _ := randBF16(r, s.n*s.k, false)
			c := make([]float32, s.m*s.n)
			MatMulNTBF16(c, x, w, s.m, s.n, s.k)
			cpu0 := processCPU()
			for b.Loop() {
				MatMulNTBF16(c, x, w, s.m, s.n, s.k)
			}
			reportGFLOPs(b, 2*float64(s.m)*float64(s.n)*float64(s.k), cpu0)
		})
	}
}

// BenchmarkMatVecNTBF16 is BenchmarkMatVecNT (the decode step's products)
// with bf16 weights: half the bytes per multiply-add. MB/s counts the
// weight bytes read.
func BenchmarkMatVecNTBF16(b *testing.B) {
	for _, s := range []struct{ n, k int }{{2048, 2048}, {6656, 2048}, {2048, 6656}} {
		b.Run(fmt.Sprintf("n%d_k%d", s.n, s.k), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			w, _ := randBF16(r, s.n*s.k, false)
			x := randF32(r, s.k)
			y := make([]float32, s.n)
			b.SetBytes(int64(2 * s.n * s.k))
			cpu0 := processCPU()
			for b.Loop() {
				MatVecNTBF16(y, w, x, s.n, s.k)
			}
			if cpu := processCPU() - cpu0; cpu > 0 {
				b.ReportMetric(float64(2*s.n*s.k)*float64(b.N)/cpu.Seconds()/1e9, "GB/CPU-s")
				b.ReportMetric(2*float64(s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			}
		})
	}
}
