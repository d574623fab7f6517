package qnn

import (
	"math"

	"sparkconv/kernels"
)

// SearchSteps are the clipping ratios SearchScales tries: channel j's
// symmetric grid covers c * absmax_j for c = 1 - i/100, i = 0..50.
const SearchSteps = 50

// searchCoarse is the coarse stride of the search over i (every fifth
// ratio first, then the four on either side of the best).
const searchCoarse = 5

// ScaleSearch is what SearchScales chose for one weight.
type ScaleSearch struct {
	// Clip is each output channel's clipped absolute maximum (c_j *
	// absmax_j): SymmetricEncoding of it gives the chosen grid.
	Clip []float64
	// Err and AbsmaxErr are the H-weighted errors summed over the channels
	// for the chosen grids and for the absmax grids.
	Err, AbsmaxErr float64
}

// SearchScales chooses the symmetric bw-bit grid of each output channel of
// a MatMul weight w [k, n] (input rows, output columns, the ONNX MatMul
// layout) by the error it causes in the MatMul's output on the calibration
// inputs, SeqMSE's per-channel search (AIMET's sequential_mse): channel j's
// scale is SymmetricScale(c absmax_j, bw) for the ratio c of 1.00, 0.99, ...,
// 0.50 that minimises (w_j - ŵ_j)ᵀ H (w_j - ŵ_j), with h [k*k] = Σ x xᵀ over
// the inputs x of the MatMul, ŵ_j the weights rounded to the grid as
// QuantizeLinear rounds them (half to even, clamped to [-2^(bw-1),
// 2^(bw-1)-1]) and dequantized in float32. The ratios are searched every
// fifth, then the four on either side of each channel's best; ratio 1 (the
// absmax grid) is among them, so a channel's error is never above
// absmax's.
func SearchScales(w []float32, k, n int, h []float64, bw int) ScaleSearch {
	absmax := ParamAbsMax(w, []int64{int64(k), int64(n)}, 1)
	res := ScaleSearch{Clip: append([]float64(nil), absmax...)}
	best := make([]int, n)
	bestErr := make([]float64, n)
	e := make([]float64, k*n)
	he := make([]float64, k*n)
	errs := make([]float64, n)
	lo, hi := -math.Exp2(float64(bw-1)), math.Exp2(float64(bw-1))-1
	// eval computes every channel's error at ratio step[j].
	scale := make([]float32, n)
	eval := func(step []int) {
		for j := range n {
			scale[j] = SymmetricScale((1-float64(step[j])/100)*absmax[j], bw)
		}
		kernels.Parallel(k, func(r0, r1 int) {
			for r := r0; r < r1; r++ {
				for j, s := range scale {
					v := w[r*n+j]
					q := math.Max(lo, math.Min(hi, math.RoundToEven(float64(v)/float64(s))))
					e[r*n+j] = float64(v) - float64(float32(q)*s)
				}
			}
		})
		kernels.Dgemm(false, false, k, n, k, 1, h, k, e, n, 0, he, n)
		clear(errs)
		for r := range k {
			for j := range n {
				errs[j] += e[r*n+j] * he[r*n+j]
			}
		}
	}
	step := make([]int, n)
	first := true
	try := func() {
		eval(step)
		for j := range n {
			if first || errs[j] < bestErr[j] {
				best[j], bestErr[j] = step[j], errs[j]
			}
		}
		first = false
	}
	for i := 0; i <= SearchSteps; i += searchCoarse {
		for j := range step {
			step[j] = i
		}
		try()
		if i == 0 {
			for _, v := range errs {
				res.AbsmaxErr += v
			}
		}
	}
	coarse := append([]int(nil), best...)
	for d := -searchCoarse + 1; d < searchCoarse; d++ {
		if d == 0 {
			continue
		}
		for j := range step {
			step[j] = min(max(coarse[j]+d, 0), SearchSteps)
		}
		try()
	}
	for j := range n {
		res.Clip[j] = (1 - float64(best[j])/100) * absmax[j]
		res.Err += bestErr[j]
	}
	return res
}

// WeightedErr is (w_j - ŵ_j)ᵀ H (w_j - ŵ_j) summed over the output channels
// of w [k, n] under the symmetric bw-bit grids of clip (one clipped absmax
// per channel), computed directly (SearchScales' tests measure with it).
func WeightedErr(w []float32, k, n int, h []float64, bw int, clip []float64) float64 {
	lo, hi := -math.Exp2(float64(bw-1)), math.Exp2(float64(bw-1))-1
	var total float64
	d := make([]float64, k)
	for j := range n {
		s := SymmetricScale(clip[j], bw)
		for r := range k {
			v := w[r*n+j]
			q := math.Max(lo, math.Min(hi, math.RoundToEven(float64(v)/float64(s))))
			d[r] = float64(v) - float64(float32(q)*s)
		}
		for a := range k {
			var row float64
			for b := range k {
				row += h[a*k+b] * d[b]
			}
			total += d[a] * row
		}
	}
	return total
}
