package kernels

import "golang.org/x/sys/cpu"

//go:noescape
func absmaxBF16AVX2(src *uint16, n int) uint16

//go:noescape
func int8BF16AVX2(dst *int8, src *uint16, n64 int, scale float32, acc *[2]float64) uint32

func init() {
	if envFamily >= familyAVX2 && cpu.X86.HasAVX2 {
		absmaxBF16Fn = absmaxBF16AVX2
		int8BF16Fn = int8BF16AVX2
	}
}
