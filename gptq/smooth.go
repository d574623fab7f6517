package gptq

import (
	"fmt"

	"sparkconv/calib"
	"sparkconv/dtype"
	"sparkconv/forward"
	"sparkconv/kernels"
	"sparkconv/quant"
	"sparkconv/spark"
)

// SmoothQuant before W8A8 (llm-compressor's SmoothQuantModifier,
// docs/formats.md#w8a8): per input channel j of a normed input, the scale
// s_j of quant.SmoothScales with max|W_:,j| over every linear reading it;
// X is divided by s, folded into the norm's weight,
// and those linears' weights are multiplied by s. g_proj reads the same
// input as q_k_v_proj, so it is scaled with it (it stays float, written
// with the scaled weights); otherwise it would silently receive X/s.

// smoothInput applies SmoothQuant to input p of layer l before its
// modules are solved: the norm's new weight (rounded to its stored dtype)
// defines the effective scales s_j = norm_j / norm'_j, the Hessian and the
// held-out rows are rescaled to the smoothed input X/s, the quantized
// readers' float32 weights and g_proj are multiplied by s, and the new norm
// and g_proj weights are recorded for the writer.
func (r *run) smoothInput(i int, l *forward.Layer, p forward.Point, h *calib.Hessian) error {
	var site forward.LinearInput
	for _, in := range forward.LinearInputs {
		if in.Point == p {
			site = in
		}
	}
	if site.Norm == "" {
		return nil
	}
	k := h.K
	norm := l.InNorm
	if site.Norm == spark.PostNorm {
		norm = l.PostNorm
	}
	normName := spark.LayerWeight(i, site.Norm)
	info, ok := r.j.Model.Info(normName)
	if !ok {
		return fmt.Errorf("smooth: %s not in the model", normName)
	}
	wmax := make([]float64, k)
	for _, m := range site.Readers {
		quant.ColumnAbsMax(wmax, *l.Linear(m))
	}
	amax := make([]float64, k)
	for c, v := range h.AbsMax[:k] {
		amax[c] = float64(v)
	}
	// The norm is divided by the float64 scale: rounding s to float32
	// first would change the written norm.
	scales := quant.SmoothScales(amax, wmax, r.c.Smooth)
	s := make([]float32, k)
	newNorm := make([]float32, k)
	for c, sc := range scales {
		newNorm[c] = dtype.Round(float32(float64(norm[c])/sc), info.DType)
		s[c] = 1
		if norm[c] != 0 && newNorm[c] != 0 {
			s[c] = norm[c] / newNorm[c] // exactly what the written norm divides X by
		}
	}
	kernels.Parallel(k, func(lo, hi int) {
		for a := lo; a < hi; a++ {
			row := h.H[a*k : (a+1)*k]
			for b := range row {
				row[b] /= float64(s[a]) * float64(s[b])
			}
		}
	})
	for rI := 0; rI < h.HeldRows(); rI++ {
		row := h.Held[rI*k : (rI+1)*k]
		for c := range row {
			row[c] /= s[c]
		}
	}
	for _, m := range site.QuantReaders() {
		quant.ScaleColumns(*l.Linear(m), s)
	}
	copy(norm, newNorm)
	r.st.replace(normName, newNorm)
	for _, m := range site.FloatReaders() {
		w := *l.Linear(m)
		quant.ScaleColumns(w, s)
		name := spark.LayerWeight(i, m)
		wi, _ := r.j.Model.Info(name)
		for c := range w {
			w[c] = dtype.Round(w[c], wi.DType)
		}
		r.st.replace(name, append([]float32(nil), w...))
	}
	return nil
}
