package quant

import (
	"math"

	"sparkconv/kernels"
)

// SmoothQuant's scale rule (Xiao et al.; llm-compressor's
// SmoothQuantModifier): per input channel j of a linear input X read by
// weights W, s_j = max|X_j|^alpha / max|W[:, j]|^(1-alpha), clamped to at
// least SmoothMinScale; X is divided by s and W's column j multiplied by
// s_j, so X·Wᵀ is unchanged and the activation's outlier channels move into
// the weights. Both smoothings (gptq's --smooth on a norm's output,
// rotate's --smooth-down on down_proj's input) take their scales from here.

// SmoothMinScale is the smallest smoothing scale (llm-compressor's clamp).
const SmoothMinScale = 1e-5

// ColumnAbsMax raises into[j] to max |w[:, j]| for the row-major
// w [*, len(into)]; called once per weight reading the input, it gives the
// maxima over all of them.
func ColumnAbsMax(into []float64, w []float32) {
	k := len(into)
	for r := 0; r < len(w)/k; r++ {
		for j, v := range w[r*k : (r+1)*k] {
			into[j] = max(into[j], math.Abs(float64(v)))
		}
	}
}

// SmoothScales returns s_j = max(actMax_j^alpha / weightMax_j^(1-alpha),
// SmoothMinScale), in float64; a dead channel (actMax_j or weightMax_j
// zero) keeps 1. actMax is max |X_j| over the calibration rows and
// weightMax max |W[:, j]| (ColumnAbsMax); alpha is in (0, 1).
func SmoothScales(actMax, weightMax []float64, alpha float64) []float64 {
	s := make([]float64, len(actMax))
	for j, a := range actMax {
		s[j] = 1
		if a > 0 && weightMax[j] > 0 {
			s[j] = max(math.Pow(a, alpha)/math.Pow(weightMax[j], 1-alpha), SmoothMinScale)
		}
	}
	return s
}

// ScaleColumns multiplies column c of the row-major w [*, len(s)] by s[c]
// (the weight side of a smoothing), rows in parallel.
func ScaleColumns(w []float32, s []float32) {
	k := len(s)
	kernels.Parallel(len(w)/k, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row := w[r*k : (r+1)*k]
			for c := range row {
				row[c] *= s[c]
			}
		}
	})
}
