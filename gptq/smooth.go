package gptq

import (
	"fmt"
	"math"

	"sparkconv/calib"
	"sparkconv/dtype"
	"sparkconv/forward"
	"sparkconv/kernels"
	"sparkconv/spark"
)

// SmoothQuant before W8A8 (llm-compressor's SmoothQuantModifier,
// docs/formats.md#w8a8): per input channel j of a normed input,
// s_j = max|X_j|^alpha / max|W_:,j|^(1-alpha) over every linear reading it
// (clamped to >= 1e-5); X is divided by s, folded into the norm's weight,
// and those linears' weights are multiplied by s. g_proj reads the same
// input as q_k_v_proj, so it is scaled with it (it stays float, written
// with the scaled weights); otherwise it would silently receive X/s.

// smoothMinScale is llm-compressor's clamp of the smoothing scales.
const smoothMinScale = 1e-5

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
	readers := [][]float32{}
	for _, m := range site.Readers {
		readers = append(readers, *l.Linear(m))
	}
	wmax := make([]float64, k)
	for _, w := range readers {
		for n := 0; n < len(w)/k; n++ {
			for c, v := range w[n*k : (n+1)*k] {
				wmax[c] = max(wmax[c], math.Abs(float64(v)))
			}
		}
	}
	a := r.c.Smooth
	s := make([]float32, k)
	newNorm := make([]float32, k)
	for c := range k {
		sc := 1.0 // a dead channel (no input or no weight) keeps its scale
		if h.AbsMax[c] > 0 && wmax[c] > 0 {
			sc = max(math.Pow(float64(h.AbsMax[c]), a)/math.Pow(wmax[c], 1-a), smoothMinScale)
		}
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
		scaleColumns(*l.Linear(m), s)
	}
	copy(norm, newNorm)
	r.st.replace(normName, newNorm)
	for _, m := range site.FloatReaders() {
		w := *l.Linear(m)
		scaleColumns(w, s)
		name := spark.LayerWeight(i, m)
		wi, _ := r.j.Model.Info(name)
		for c := range w {
			w[c] = dtype.Round(w[c], wi.DType)
		}
		r.st.replace(name, append([]float32(nil), w...))
	}
	return nil
}

// scaleColumns multiplies column c of the row-major w [*, len(s)] by s[c].
func scaleColumns(w []float32, s []float32) {
	k := len(s)
	kernels.Parallel(len(w)/k, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			row := w[n*k : (n+1)*k]
			for c := range row {
				row[c] *= s[c]
			}
		}
	})
}
