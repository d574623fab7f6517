package kernels

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkMicroKernel measures each float32 micro-kernel on L1-resident
// panels: the ceiling for the GEMM driver.
func BenchmarkMicroKernel(b *testing.B) {
	for _, kern := range sgemmAll {
		b.Run(kern.name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			kc := kern.kc
			a, bb := randF32(r, kc*kern.mr), randF32(r, kc*kern.nr)
			c := make([]float32, kern.mr*kern.nr)
			cpu0 := processCPU()
			for b.Loop() {
				kern.fn(kc, a, bb, c, kern.nr)
			}
			reportGFLOPs(b, 2*float64(kc*kern.mr*kern.nr), cpu0)
		})
	}
}

func BenchmarkMicroKernel64(b *testing.B) {
	for _, kern := range dgemmAll {
		b.Run(kern.name, func(b *testing.B) {
			kc := kern.kc
			a, bb := make([]float64, kc*kern.mr), make([]float64, kc*kern.nr)
			c := make([]float64, kern.mr*kern.nr)
			cpu0 := processCPU()
			for b.Loop() {
				kern.fn(kc, a, bb, c, kern.nr)
			}
			reportGFLOPs(b, 2*float64(kc*kern.mr*kern.nr), cpu0)
		})
	}
}
