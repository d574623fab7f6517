package kernels

// bf16 -> fp16 conversion for the fp16 ONNX export: widening to float32 is
// exact, so the result is float32 -> fp16 with round to nearest even,
// overflow to ±Inf and fp16 subnormals, exactly what a scalar conversion of
// the widened value gives (the export's portable path; tested over all
// 65536 bf16 values).

// BF16ToF16 converts the first done values of src into dst (a multiple of
// 8; 0 when no SIMD kernel runs). len(dst) >= len(src).
func BF16ToF16(dst, src []uint16) (done int) {
	n := len(src) &^ 7
	if !quantSIMD || n == 0 {
		return 0
	}
	_ = dst[n-1]
	bf16ToF16AVX2(&dst[0], &src[0], n/8)
	return n
}

// BF16ToF16T8x8 converts and transposes one 8x8 tile: dst[c*ldd+r] =
// fp16(src[r*lds+c]) for r, c < 8. It reports false (and does nothing)
// when no SIMD kernel runs.
func BF16ToF16T8x8(dst []uint16, ldd int, src []uint16, lds int) bool {
	if !quantSIMD {
		return false
	}
	_ = src[7*lds+7]
	_ = dst[7*ldd+7]
	bf16ToF16T8x8AVX2(&dst[0], ldd, &src[0], lds)
	return true
}
