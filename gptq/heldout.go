package gptq

import (
	"fmt"
	"math"

	"sparkconv/kernels"
	"sparkconv/quant"
)

// RoundToNearest quantizes m on g without a Hessian: every group's
// parameters from its own weights (the same rule the solve fits), every
// code the nearest. It is the baseline of the report and the fallback.
func RoundToNearest(dst *Result, m quant.Matrix, g Grid) error {
	n, k := m.N, m.K
	gs := g.group(k)
	if gs <= 0 || k%gs != 0 {
		return fmt.Errorf("gptq: group size %d does not divide K=%d", gs, k)
	}
	dst.size(n, k, gs, g.Kind.Zeros())
	stats := make([]quant.ErrStats, n)
	kernels.Parallel(n, func(lo, hi int) {
		buf, deq := make([]float32, k), make([]float32, k)
		for r := lo; r < hi; r++ {
			row := m.Row(r, buf)
			for gi := range k / gs {
				seg := row[gi*gs : (gi+1)*gs]
				p := g.fit(seg)
				i := r*(k/gs) + gi
				dst.Scales[i] = p.scale
				if dst.Zeros != nil {
					dst.Zeros[i] = p.zero
				}
				for j, w := range seg {
					dst.Codes[r*k+gi*gs+j], deq[gi*gs+j] = g.code(p, w)
				}
			}
			stats[r] = quant.Compare(row, deq)
		}
	})
	for _, s := range stats {
		dst.Stats.Merge(s)
	}
	return nil
}

// heldOutRowsBlock is how many weight rows heldOutErr widens at a time.
const heldOutRowsBlock = 1024

// dequantizer gives the dequantized row n of a quantized matrix whose
// original row is w.
type dequantizer interface {
	dequantizeRow(g Grid, n int, w, dst []float32)
}

func (r *Result) dequantizeRow(g Grid, n int, _, dst []float32) { r.Dequantize(g, n, dst) }

// nearest is round to nearest computed row by row as heldOutErr needs it
// (the same groups, parameters and codes as RoundToNearest), so the
// baseline of the report costs no whole Result: for the head that would be
// 268 MB of codes held next to GPTQ's.
type nearest struct{}

func (nearest) dequantizeRow(g Grid, _ int, w, dst []float32) {
	gs := g.group(len(w))
	for g0 := 0; g0 < len(w); g0 += gs {
		p := g.fit(w[g0 : g0+gs])
		for j, v := range w[g0 : g0+gs] {
			_, dst[g0+j] = g.code(p, v)
		}
	}
}

// heldOutErr is, for each result, ||X (W - Q)^T||^2 / ||X W^T||^2 over the
// rows X [t, K]: the output error relative to the output's energy, on rows
// the Hessian never saw. It works through blocks of W's rows, so the head
// needs no full float32 copy; after each block it calls done (if set), so
// that a mapped matrix can drop the pages it read. NaN when there are no
// rows (or W's output is zero); +Inf when X W^T is not finite in float32.
func heldOutErr(x []float32, t int, m quant.Matrix, g Grid, done func(), results ...dequantizer) []float64 {
	out := make([]float64, len(results))
	if t == 0 {
		for i := range out {
			out[i] = math.NaN()
		}
		return out
	}
	k := m.K
	nb := min(m.N, heldOutRowsBlock)
	w, d, y := make([]float32, nb*k), make([]float32, nb*k), make([]float32, t*nb)
	var base float64
	errs := make([]float64, len(results))
	for n0 := 0; n0 < m.N; n0 += nb {
		rows := min(nb, m.N-n0)
		kernels.Parallel(rows, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				copy(w[r*k:(r+1)*k], m.Row(n0+r, w[r*k:(r+1)*k]))
			}
		})
		if done != nil {
			done()
		}
		kernels.Sgemm(false, true, t, rows, k, 1, x, k, w, k, 0, y, rows)
		base += sumSq(y[:t*rows])
		for i, res := range results {
			kernels.Parallel(rows, func(lo, hi int) {
				for r := lo; r < hi; r++ {
					dr, wr := d[r*k:(r+1)*k], w[r*k:(r+1)*k]
					res.dequantizeRow(g, n0+r, wr, dr)
					for c, v := range wr {
						dr[c] = v - dr[c]
					}
				}
			})
			kernels.Sgemm(false, true, t, rows, k, 1, x, k, d, k, 0, y, rows)
			errs[i] += sumSq(y[:t*rows])
		}
	}
	for i := range out {
		out[i] = errs[i] / base
		if math.IsInf(base, 0) || math.IsNaN(base) {
			out[i] = math.Inf(1)
		}
	}
	return out
}

func sumSq(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return s
}
