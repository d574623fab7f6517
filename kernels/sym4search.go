package kernels

// Sym4Err is the error pass of package quant's symmetric 4-bit search over
// the first done = 16*(len(w)/16) values: the codes r = clamp(rint(w*inv),
// -8, 7) (the product in float32, ties to even), the squared errors of w -
// r*s in quant's order (per 16 values, four float32 lanes over elements l,
// l+4, l+8, l+12 in order, combined as (e0+e1)+(e2+e3) and widened; blocks
// added in float64 in order). A complete pass (complete) gives quant's
// total bit for bit; otherwise the pass stopped within four blocks of
// where the total first went above limit, and total is above limit. ok is
// false when no SIMD kernel runs.
func Sym4Err(w []float32, s, inv float32, limit float64) (total float64, complete bool, done int, ok bool) {
	n := len(w) &^ 15
	if !quantSIMD {
		return 0, false, 0, false
	}
	if n == 0 {
		return 0, true, 0, true
	}
	total, complete = sym4ErrAVX2(&w[0], n/16, s, inv, limit)
	return total, complete, n, true
}

// Asym4Err is Sym4Err for the asymmetric grid: codes r = clamp(rint((w -
// z)*inv), -8, 7), errors of w - (float32(r*s) + z).
func Asym4Err(w []float32, s, z, inv float32, limit float64) (total float64, complete bool, done int, ok bool) {
	n := len(w) &^ 15
	if !quantSIMD {
		return 0, false, 0, false
	}
	if n == 0 {
		return 0, true, 0, true
	}
	total, complete = asym4ErrAVX2(&w[0], n/16, s, z, inv, limit)
	return total, complete, n, true
}

// Sym4Sums gives the least-squares refit's sums over the first done =
// 16*(len(w)/16) values' symmetric codes r (as Sym4Err's): sums = Σ w·r,
// Σ r², in float64 and in an order of their own, so they are the
// sequential sums only where no partial sum can round (the caller's
// bound). ok is false when no SIMD kernel runs.
func Sym4Sums(w []float32, inv float32, sums *[2]float64) (done int, ok bool) {
	n := len(w) &^ 15
	*sums = [2]float64{}
	if !quantSIMD {
		return 0, false
	}
	if n > 0 {
		sym4SumsAVX2(&w[0], n/16, inv, sums)
	}
	return n, true
}

// Asym4Sums is Sym4Sums for the asymmetric codes, with sums = Σ w·r, Σ
// r², Σ r.
func Asym4Sums(w []float32, z, inv float32, sums *[3]float64) (done int, ok bool) {
	n := len(w) &^ 15
	*sums = [3]float64{}
	if !quantSIMD {
		return 0, false
	}
	if n > 0 {
		asym4SumsAVX2(&w[0], n/16, z, inv, sums)
	}
	return n, true
}

// Range describes a group of weights for the 4-bit grids' parameters.
type Range struct {
	Lo, Hi float32 // the smallest and largest value
	AbsMax uint32  // the float32 bits of the largest magnitude
	MinNZ  uint32  // the float32 bits of the smallest nonzero magnitude; 0 if every value is ±0
	Sum    float64 // Σ w
}

// RangeF32 fills r for the first done values of w (a multiple of 16; 0
// when no SIMD kernel runs or w[0] is NaN). A NaN never becomes Lo or Hi
// (the comparisons keep the value they have, as a strict x < lo does),
// but its bits count in AbsMax. Of a +0 and a -0 either may be Lo or Hi.
// Sum is summed in float64 in an order of its own (four lanes in each of
// two streams): it is exact, and equal to the sequential sum, whenever no
// partial sum can round (e.g. AbsMax < 2^15 MinNZ and done <= 256).
func RangeF32(w []float32, r *Range) (done int) {
	n := len(w) &^ 15
	if !quantSIMD || n == 0 || w[0] != w[0] {
		return 0
	}
	rangeF32AVX2(&w[0], n/16, r)
	return n
}
