package rotate

import (
	"math"

	"sparkconv/forward"
	"sparkconv/kernels"
	"sparkconv/quant"
)

// Per-layer alpha (rotate --smooth-down auto): for each layer the alpha of
// AutoAlphas whose smoothing gives down_proj the lowest W8A8 output error on
// the calibration tokens, ||X·Wᵀ - q8(X/s)·q8(W·s)ᵀ||² / ||X·Wᵀ||², with X
// the down_proj input, W the rotated down_proj, q8 of X per token (vLLM's
// dynamic int8) and of W·s per output row (compressed-tensors' amax/127.5
// grid, round to nearest). Alpha 0 stands for no smoothing (s = 1).

// AutoAlphas are the candidates of --smooth-down auto.
var AutoAlphas = []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9}

// choice is one layer's pick: its alpha, scales and the error of every
// candidate (AutoAlphas order).
type choice struct {
	alpha float64
	s     []float32
	errs  []float64
}

// chooseAlpha returns the candidate of AutoAlphas with the lowest W8A8
// error for x [T, k] (the down_proj input) and down [n, k].
func chooseAlpha(x []float32, amax []float64, down []float32, k int) choice {
	T, n := len(x)/k, len(down)/k
	ref := make([]float32, T*n)
	kernels.MatMulNT(ref, x, down, T, n, k)
	var refSq float64
	for _, v := range ref {
		refSq += float64(v) * float64(v)
	}
	best := choice{errs: make([]float64, len(AutoAlphas))}
	bestErr := math.Inf(1)
	xs, ws, out := make([]float32, len(x)), make([]float32, len(down)), make([]float32, T*n)
	for c, a := range AutoAlphas {
		s := ones(k)
		if a > 0 {
			s = smoothScales(amax, down, a)
		}
		e := w8a8Err(x, down, s, xs, ws, out, ref, k) / max(refSq, math.SmallestNonzeroFloat64)
		best.errs[c] = e
		if e < bestErr {
			bestErr, best.alpha, best.s = e, a, s
		}
	}
	return best
}

// w8a8Err is ||ref - q8(x/s)·q8(down·s)ᵀ||², xs, ws and out scratch of
// x's, down's and ref's sizes.
func w8a8Err(x, down []float32, s []float32, xs, ws, out, ref []float32, k int) float64 {
	T, n := len(x)/k, len(down)/k
	copy(xs, x)
	divideColumns(xs, s)
	forward.Act{Int8: forward.Int8Dynamic}.Apply(xs, xs, k)
	copy(ws, down)
	quant.ScaleColumns(ws, s)
	kernels.Parallel(n, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row := ws[r*k : (r+1)*k]
			p := quant.Int8Absmax(row, quant.ScaleF32)
			for j, v := range row {
				row[j] = p.Value(p.Code(v))
			}
		}
	})
	kernels.MatMulNT(out, xs, ws, T, n, k)
	var e float64
	for i, v := range out {
		d := float64(v) - float64(ref[i])
		e += d * d
	}
	return e
}

// divideColumns divides column c of the row-major w [*, len(s)] by s[c].
func divideColumns(w []float32, s []float32) {
	k := len(s)
	for r := 0; r < len(w)/k; r++ {
		row := w[r*k : (r+1)*k]
		for c := range row {
			row[c] /= s[c]
		}
	}
}

func ones(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

// actRows keeps down_proj's input rows of the calibration text (with their
// per-channel absmax) for the alpha search.
type actRows struct {
	actMax
	keep bool // keep the rows (else only the maxima)
	rows []float32
}

func (a *actRows) Observe(layer int, p forward.Point, data []float32, cols int) {
	a.actMax.Observe(layer, p, data, cols)
	if a.keep && p == forward.MLPAct {
		a.rows = append(a.rows, data...)
	}
}
