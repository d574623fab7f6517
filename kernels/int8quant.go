package kernels

// Kernels of the per-channel int8 quantizer on raw bf16 weights (package
// quant owns the rule; these are its SIMD bodies): the absmax that sets a
// row's scale, and a fused widen-quantize-measure pass. Each handles the
// longest prefix of whole 64-value blocks it can and reports how far it
// got; the caller finishes the rest with its portable code, so the results
// are those of the portable code bit for bit.

// quantSIMD is set when the AVX2 bodies of the quantizer kernels may run
// (the CPU has AVX2 and SPARKCONV_KERNELS allows it). They are called
// directly, not through function values, so that pointer arguments stay
// on the caller's stack.
var quantSIMD bool

// AbsMaxBF16 returns max(src[i] & 0x7fff) over the first done values of
// src (a multiple of 64; 0 when no SIMD kernel runs).
func AbsMaxBF16(src []uint16) (amax uint16, done int) {
	n := len(src) &^ 63
	if !quantSIMD || n == 0 {
		return 0, 0
	}
	return absmaxBF16AVX2(&src[0], n), n
}

// Int8BF16 quantizes the first done values of the bf16 bits src (a
// multiple of 64; 0 when no SIMD kernel runs) into dst with scale s:
// dst[i] = clamp(rint(w/s), -128, 127), w the widened value, the division
// in float32 and round half to even. It adds Σw² and Σ(w - dst[i]*s)² to
// sums[0] and sums[1] in quant's block order (per 16 values, the even and
// the odd values each summed in float32 in order, the two sums added in
// float32 and widened; blocks added in float64 in order) and returns the
// float32 bits of the largest |w - dst[i]*s|.
func Int8BF16(dst []int8, src []uint16, s float32, sums *[2]float64) (maxBits uint32, done int) {
	n := len(src) &^ 63
	if !quantSIMD || n == 0 {
		return 0, 0
	}
	_ = dst[n-1]
	return int8BF16AVX2(&dst[0], &src[0], n/64, s, sums), n
}

// Quant4F32 is the quantize-and-measure pass of package quant's 4-bit
// grids over the first done values of w (a multiple of 64; 0 when no SIMD
// kernel runs): r = clamp(rint((w - z)*inv), -8, 7) with the product in
// float32 and ties to even, dst[i] = r + 8, statistics as Int8BF16's of
// the errors w - (float32(r*s) + z) (z = 0 for the symmetric grid).
func Quant4F32(dst []uint8, w []float32, s, z, inv float32, sums *[2]float64) (maxBits uint32, done int) {
	n := len(w) &^ 63
	if !quantSIMD || n == 0 {
		return 0, 0
	}
	_ = dst[n-1]
	return quant4F32AVX2(&dst[0], &w[0], n/64, s, z, inv, sums), n
}

// WidenAbsMaxBF16 writes the float32 value of each of the first done bf16
// bits of src into dst (done a multiple of 16; 0 when no SIMD kernel runs)
// and returns max(src[i] & 0x7fff) over them.
func WidenAbsMaxBF16(dst []float32, src []uint16) (amax uint16, done int) {
	n := len(src) &^ 15
	if !quantSIMD || n == 0 {
		return 0, 0
	}
	_ = dst[n-1]
	return widenBF16AVX2(&dst[0], &src[0], n/16), n
}

// AbsMaxF32 returns the largest float32 magnitude's bits (w[i] &
// 0x7fffffff, NaN bits included) over the first done values of w (a
// multiple of 16; 0 when no SIMD kernel runs).
func AbsMaxF32(w []float32) (amaxBits uint32, done int) {
	n := len(w) &^ 15
	if !quantSIMD || n == 0 {
		return 0, 0
	}
	return absmaxF32AVX2(&w[0], n/16), n
}
