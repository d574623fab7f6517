//go:build !amd64

package kernels

// Without amd64 assembly the quantizer kernels report that they did
// nothing (quantSIMD stays false) and quant runs its portable code.

func absmaxBF16AVX2(*uint16, int) uint16 { panic("kernels: no AVX2") }

func int8BF16AVX2(*int8, *uint16, int, float32, *[2]float64) uint32 { panic("kernels: no AVX2") }

func sym4ErrAVX2(*float32, int, float32, float32, float64) (float64, bool) {
	panic("kernels: no AVX2")
}

func sym4SumsAVX2(*float32, int, float32, *[2]float64) { panic("kernels: no AVX2") }

func asym4SumsAVX2(*float32, int, float32, float32, *[3]float64) { panic("kernels: no AVX2") }

func bf16ToF16AVX2(*uint16, *uint16, int) { panic("kernels: no AVX2") }

func bf16ToF16T8x8AVX2(*uint16, int, *uint16, int) { panic("kernels: no AVX2") }

func asym4ErrAVX2(*float32, int, float32, float32, float32, float64) (float64, bool) {
	panic("kernels: no AVX2")
}

func quant4F32AVX2(*uint8, *float32, int, float32, float32, float32, *[2]float64) uint32 {
	panic("kernels: no AVX2")
}

func widenBF16AVX2(*float32, *uint16, int) uint16 { panic("kernels: no AVX2") }

func rangeF32AVX2(*float32, int, *Range) { panic("kernels: no AVX2") }

func absmaxF32AVX2(*float32, int) uint32 { panic("kernels: no AVX2") }
