package gptq

import (
	"math"

	"sparkconv/convert"
	"sparkconv/kernels"
	"sparkconv/quant"
)

// refineRows is how many rows of W one refinement panel holds (two
// [rows, K] float32 buffers).
const refineRows = 256

// refine fits the group parameters of a solved matrix again, its codes
// held fixed, to the loss GPTQ itself minimises: Σ_rows (w - ŵ)ᵀ H (w - ŵ),
// the squared output error on the calibration inputs, with H = XᵀX
// (hf, [K, K] float32, undamped) rather than the plain squared weight
// error each group's search used. GPTQ fixes a group's parameters before
// its codes are chosen (at the group boundary, or up front with static
// groups); once the codes are known, the parameters that serve them best
// under H follow by least squares. This is exact block coordinate descent
// on that convex quadratic: each group's (scale, zero) step solves its
// 2x2 (1x1 on the symmetric, integer-zero and int8 grids: the scale alone)
// normal equations given the other groups, and the residual's product with
// H is kept up to date with one GEMM per group. The new parameters are rounded to the grid's dtype
// before they count, so the loss never rises by more than that rounding.
// With recode, each of the sweeps first revisits the codes, on the 4-bit
// grids, with the parameters held (recode: coordinate descent over each row's codes,
// each one GPTQ chose greedily, column by column, moved to its best given
// all the others), then refits every group's parameters to them. Stats is
// measured again after them.
// It returns the loss after the refit (0 sweeps: the loss of res as it is).
func refine(res *Result, m quant.Matrix, hf []float32, g Grid, sweeps int, recode bool) float64 {
	k, gs := res.K, res.Group
	ng := k / gs
	asym := g.Kind == convert.GridAsym4
	// Σ of each diagonal block of H: the zero's own normal coefficient,
	// the same for every row.
	blockSum := make([]float64, ng)
	for gi := range ng {
		lo := gi * gs
		var s float64
		for i := lo; i < lo+gs; i++ {
			for _, v := range hf[i*k+lo : i*k+lo+gs] {
				s += float64(v)
			}
		}
		blockSum[gi] = s
	}
	rows := min(res.N, refineRows)
	d, gr := make([]float32, rows*k), make([]float32, rows*k)
	c, u, a := make([]float32, rows*gs), make([]float32, rows*gs), make([]float32, rows*gs)
	gains := make([]float64, rows)
	var loss float64
	for n0 := 0; n0 < res.N; n0 += rows {
		p := min(rows, res.N-n0)
		kernels.Parallel(p, func(lo, hi int) {
			deq := make([]float32, k)
			for r := lo; r < hi; r++ {
				row := m.Row(n0+r, d[r*k:(r+1)*k])
				copy(d[r*k:(r+1)*k], row)
				res.Dequantize(g, n0+r, deq)
				for j := range deq {
					d[r*k+j] -= deq[j]
				}
			}
		})
		// G = D H: the gradient of each row's loss, up to a factor -2.
		kernels.Sgemm(false, false, p, k, k, 1, d, k, hf, k, 0, gr, k)
		for i, v := range d[:p*k] {
			loss += float64(v) * float64(gr[i])
		}
		for range sweeps {
			if recode {
				kernels.Parallel(p, func(r0, r1 int) {
					for r := r0; r < r1; r++ {
						gains[r] += res.recode(g, n0+r, hf, gr[r*k:(r+1)*k])
					}
				})
			}
			for gi := range ng {
				lo := gi * gs
				kernels.Parallel(p, func(r0, r1 int) {
					for r := r0; r < r1; r++ {
						res.centered(g, n0+r, gi, c[r*gs:(r+1)*gs])
					}
				})
				// U = C H_JJ: each row's codes through its group's block.
				kernels.Sgemm(false, false, p, gs, gs, 1, c, gs, hf[lo*k+lo:], k, 0, u, gs)
				kernels.Parallel(p, func(r0, r1 int) {
					for r := r0; r < r1; r++ {
						gains[r] += res.step(g, n0+r, gi, asym, blockSum[gi], c[r*gs:(r+1)*gs], u[r*gs:(r+1)*gs],
							gr[r*k+lo:r*k+lo+gs], a[r*gs:(r+1)*gs])
					}
				})
				// G -= A H[J, :]: the rows' residuals lost A in the group.
				kernels.Sgemm(false, false, p, k, gs, -1, a, gs, hf[lo*k:], k, 1, gr, k)
			}
		}
		for r := range p {
			loss -= gains[r]
			gains[r] = 0
		}
	}
	if sweeps > 0 {
		res.restat(g, m)
	}
	return loss
}

// restat computes Stats again, the weight error against m of the
// parameters as they are now (the refit moves them after the solve
// measured it), rows merged in order as the solve merges them.
func (r *Result) restat(g Grid, m quant.Matrix) {
	stats := make([]quant.ErrStats, r.N)
	kernels.Parallel(r.N, func(lo, hi int) {
		buf, deq := make([]float32, r.K), make([]float32, r.K)
		for n := lo; n < hi; n++ {
			r.Dequantize(g, n, deq)
			stats[n] = quant.Compare(m.Row(n, buf), deq)
		}
	})
	r.Stats = quant.ErrStats{}
	for _, s := range stats {
		r.Stats.Merge(s)
	}
}

// centered writes group gi of row n's codes as the multipliers of its
// scale: q - 8 on the symmetric and float-zero 4-bit grids, q - z on the
// integer-zero one, the signed code on int8.
func (r *Result) centered(g Grid, n, gi int, dst []float32) {
	codes := r.Codes[n*r.K+gi*r.Group : n*r.K+(gi+1)*r.Group]
	off := int32(8)
	if g.Kind == convert.GridUInt4 {
		p := r.param(n*(r.K/r.Group) + gi)
		off = int32(quant.UInt4Zero(quant.Asym4{Scale: p.scale, Zero: p.zero}))
	}
	for j, q := range codes {
		if g.Kind == convert.GridInt8 {
			dst[j] = float32(int8(q))
		} else {
			dst[j] = float32(int32(q) - off)
		}
	}
}

// step moves group gi of row n to the least-squares parameters given
// the rest of the row: c are its centered codes, u = H_JJ c, hsum the sum
// of H_JJ, grad the group's part of (w - ŵ) H. It writes into a what each
// weight of the group gained (ŵ' - ŵ), zero when the step is refused,
// and returns the loss it took off.
func (r *Result) step(g Grid, n, gi int, asym bool, hsum float64, c, u, grad, a []float32) float64 {
	i := n*(r.K/r.Group) + gi
	old := r.param(i)
	var cu, su, cg, sg float64
	for j := range c {
		cu += float64(c[j]) * float64(u[j])
		su += float64(u[j])
		cg += float64(c[j]) * float64(grad[j])
		sg += float64(grad[j])
	}
	var ds, dz float64
	if asym {
		det := cu*hsum - su*su
		if !(det > 0) {
			clear(a)
			return 0
		}
		ds = (cg*hsum - su*sg) / det
		dz = (cu*sg - su*cg) / det
	} else {
		if !(cu > 0) {
			clear(a)
			return 0
		}
		ds = cg / cu
	}
	next := g.rounded(param{scale: float32(float64(old.scale) + ds), zero: float32(float64(old.zero) + dz)})
	if g.Kind == convert.GridUInt4 { // the zero point stays: (8 - z) * the new scale
		next.zero = quant.UInt4Params(next.scale, quant.UInt4Zero(quant.Asym4{Scale: old.scale, Zero: old.zero})).Zero
	}
	if !(float64(next.scale)*float64(old.scale) > 0) || math.IsInf(float64(next.scale), 0) || math.IsInf(float64(next.zero), 0) {
		clear(a)
		return 0
	}
	// The loss change of the step after rounding: -2 aᵀgrad + aᵀ H_JJ a,
	// with a = Δs c + Δz 1 (H_JJ a = Δs u + Δz H_JJ 1; the last term's
	// sum is hsum). A step that rounding made worse is not taken.
	fs, fz := float64(next.scale)-float64(old.scale), 0.0
	if asym {
		fz = float64(next.zero) - float64(old.zero)
	}
	gain := 2*(fs*cg+fz*sg) - (fs*fs*cu + 2*fs*fz*su + fz*fz*hsum)
	if !(gain > 0) {
		clear(a)
		return 0
	}
	codes := r.Codes[n*r.K+gi*r.Group : n*r.K+(gi+1)*r.Group]
	g.values(old, codes, a)
	for j, q := range codes {
		a[j] = g.value(next, q) - a[j]
	}
	r.Scales[i] = next.scale
	if r.Zeros != nil {
		r.Zeros[i] = next.zero
	}
	return gain
}

// rounded is p in the grid's parameter dtype, kept in its range.
func (g Grid) rounded(p param) param {
	switch g.Kind {
	case convert.GridAsym4:
		q := quant.Asym4{Scale: g.DType.Round(p.scale), Zero: g.DType.Round(p.zero)}
		return param{scale: q.Scale, zero: q.Zero}
	}
	return param{scale: g.DType.Round(p.scale)}
}

// recode is one coordinate-descent sweep over row n's codes, its group
// parameters held fixed, on the loss (w - ŵ) H (w - ŵ)ᵀ: each code in turn
// moves to the one that minimises the loss given the rest of the row (the
// nearest to its 1-D optimum, a convex quadratic in the code), grad (the
// row's (w - ŵ) H) kept up to date. It returns the loss it took off.
func (r *Result) recode(g Grid, n int, hf, grad []float32) float64 {
	if g.Kind == convert.GridInt8 {
		return 0
	}
	const hi = 15 // the 4-bit grids' largest code
	k, ng := r.K, r.K/r.Group
	var gain float64
	codes := r.Codes[n*k : (n+1)*k]
	for j := range k {
		hjj := hf[j*k+j]
		if !(hjj > 0) {
			continue
		}
		p := r.param(n*ng + j/r.Group)
		q := int(codes[j])
		t := float64(grad[j]) / (float64(p.scale) * float64(hjj))
		qn := min(hi, max(0, q+int(math.Round(t))))
		if qn == q {
			continue
		}
		d := float64(g.value(p, uint8(qn))) - float64(g.value(p, uint8(q)))
		dg := 2*d*float64(grad[j]) - d*d*float64(hjj)
		if !(dg > 0) {
			continue
		}
		codes[j] = uint8(qn)
		kernels.Axpy(float32(-d), hf[j*k:(j+1)*k], grad)
		gain += dg
	}
	return gain
}
