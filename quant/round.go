package quant

import (
	"math"

	"sparkconv/kernels"
)

// rintMagic is 1.5 * 2^23: adding it to a float32 |x| < 2^22 leaves round(x)
// (ties to even, the FPU's default mode) in the low mantissa bits.
const (
	rintMagic     = 12582912.0
	rintMagicBits = 0x4B400000
)

// rint rounds x to the nearest integer, ties to even, as torch.round does.
// The result is exact for |x| < 2^22. Beyond that it is still ordered
// correctly for clamping: large positive x (and +Inf, positive NaN) give a
// value >= 2^22, large negative x (and -Inf) a value <= -2^22. Callers always
// clamp to a small code range, so every float32 input yields a valid code.
// Computing in int64 keeps the sign-magnitude bits of a negative sum
// negative instead of wrapping around.
func rint(x float32) int64 {
	return int64(int32(math.Float32bits(x+rintMagic))) - rintMagicBits
}

// absBits is the bit pattern of |x|. For finite x, comparing absBits orders
// by magnitude; NaN and ±Inf give values >= 0x7f800000.
func absBits(x float32) uint32 { return math.Float32bits(x) & 0x7fffffff }

const infBits = 0x7f800000

// absmaxBits returns the largest absBits over w (0 for an empty slice).
func absmaxBits(w []float32) uint32 {
	m0, i := kernels.AbsMaxF32(w)
	var m1, m2, m3 uint32
	for ; i+4 <= len(w); i += 4 {
		c := (*[4]float32)(w[i : i+4])
		m0 = max(m0, absBits(c[0]))
		m1 = max(m1, absBits(c[1]))
		m2 = max(m2, absBits(c[2]))
		m3 = max(m3, absBits(c[3]))
	}
	for ; i < len(w); i++ {
		m0 = max(m0, absBits(w[i]))
	}
	return max(max(m0, m1), max(m2, m3))
}

// groupRange is the range of a non-empty w (kernels.Range): the SIMD
// kernel's where it runs, then the rest in order. The portable path keeps
// the first of equal extremes and sums in order; the two agree except in
// the sign of a zero Lo or Hi (which no parameter rule depends on: each
// adds a nonzero value to lo or takes a difference), and in Sum where it
// may round (where the searches do not use it).
func groupRange(w []float32) kernels.Range {
	var r kernels.Range
	done := kernels.RangeF32(w, &r)
	if done == 0 {
		r.Lo, r.Hi = w[0], w[0]
	}
	for _, x := range w[done:] {
		if x < r.Lo {
			r.Lo = x
		}
		if x > r.Hi {
			r.Hi = x
		}
		a := absBits(x)
		r.AbsMax = max(r.AbsMax, a)
		if a != 0 && (r.MinNZ == 0 || a < r.MinNZ) {
			r.MinNZ = a
		}
		r.Sum += float64(x)
	}
	return r
}
