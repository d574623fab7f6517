package kernels

import "golang.org/x/sys/cpu"

//go:noescape
func absmaxBF16AVX2(src *uint16, n int) uint16

//go:noescape
func int8BF16AVX2(dst *int8, src *uint16, n64 int, scale float32, acc *[2]float64) uint32

//go:noescape
func sym4ErrAVX2(w *float32, n16 int, s, inv float32, limit float64) (total float64, complete bool)

//go:noescape
func sym4SumsAVX2(w *float32, n16 int, inv float32, sums *[2]float64)

//go:noescape
func asym4SumsAVX2(w *float32, n16 int, z, inv float32, sums *[3]float64)

//go:noescape
func bf16ToF16AVX2(dst, src *uint16, n8 int)

//go:noescape
func bf16ToF16T8x8AVX2(dst *uint16, ldd int, src *uint16, lds int)

//go:noescape
func asym4ErrAVX2(w *float32, n16 int, s, z, inv float32, limit float64) (total float64, complete bool)

//go:noescape
func quant4F32AVX2(dst *uint8, w *float32, n64 int, s, z, inv float32, acc *[2]float64) uint32

//go:noescape
func widenBF16AVX2(dst *float32, src *uint16, n16 int) uint16

//go:noescape
func rangeF32AVX2(w *float32, n16 int, r *Range)

//go:noescape
func absmaxF32AVX2(w *float32, n16 int) uint32

func init() {
	// F16C comes with every AVX2 CPU; checked anyway for the conversions.
	if envFamily >= familyAVX2 && cpu.X86.HasAVX2 && cpu.X86.HasF16C {
		quantSIMD = true
	}
}
