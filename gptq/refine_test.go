package gptq

import (
	"math"
	"testing"

	"sparkconv/convert"
	"sparkconv/kernels"
	"sparkconv/quant"
)

// lsParams is the exact least-squares optimum of one row's group
// parameters for fixed codes under H, solved plainly in float64 (normal
// equations of all groups at once, Gaussian elimination), written from
// the loss alone: minimise (w - ŵ)ᵀ H (w - ŵ) with ŵ_j = s_g c_j (+ z_g on
// the asymmetric grid). It returns the loss at the optimum (unrounded).
func lsParams(w []float32, c []float64, h []float64, k, gs int, asym bool) float64 {
	ng := k / gs
	per := 1
	if asym {
		per = 2
	}
	m := ng * per
	// basis vector b_v (length k) of unknown v
	basis := make([][]float64, m)
	for gi := range ng {
		s := make([]float64, k)
		for j := gi * gs; j < (gi+1)*gs; j++ {
			s[j] = c[j]
		}
		basis[gi*per] = s
		if asym {
			z := make([]float64, k)
			for j := gi * gs; j < (gi+1)*gs; j++ {
				z[j] = 1
			}
			basis[gi*per+1] = z
		}
	}
	hv := func(v []float64) []float64 {
		out := make([]float64, k)
		for i := range k {
			for j := range k {
				out[i] += h[i*k+j] * v[j]
			}
		}
		return out
	}
	dot := func(a, b []float64) (s float64) {
		for i := range a {
			s += a[i] * b[i]
		}
		return
	}
	wf := make([]float64, k)
	for i, x := range w {
		wf[i] = float64(x)
	}
	hw := hv(wf)
	a := make([][]float64, m)
	for u := range m {
		hb := hv(basis[u])
		a[u] = make([]float64, m+1)
		for v := range m {
			a[u][v] = dot(basis[v], hb)
		}
		a[u][m] = dot(basis[u], hw)
	}
	for p := range m { // elimination with partial pivoting
		best := p
		for r := p + 1; r < m; r++ {
			if math.Abs(a[r][p]) > math.Abs(a[best][p]) {
				best = r
			}
		}
		a[p], a[best] = a[best], a[p]
		for r := range m {
			if r != p && a[p][p] != 0 {
				f := a[r][p] / a[p][p]
				for col := p; col <= m; col++ {
					a[r][col] -= f * a[p][col]
				}
			}
		}
	}
	d := slicesClone(wf)
	for u := range m {
		x := a[u][m] / a[u][u]
		for j := range k {
			d[j] -= x * basis[u][j]
		}
	}
	return dot(d, hv(d))
}

func slicesClone(x []float64) []float64 { return append([]float64(nil), x...) }

// TestRefineReachesLeastSquares: with the codes held fixed, the refit's
// loss never rises above the solve's, each sweep never raises it, and
// after many sweeps it is within 1 % of the exact least-squares optimum
// of the parameters (the gap is the rounding of each parameter to its
// dtype), on the symmetric, asymmetric and int8 grids, with the loss it
// returns equal to the loss recomputed from the result. Int8 with bf16
// scales is the exception that shows the rounding: a per-channel scale's
// optimum lies within bf16's step of absmax/127, so no step survives the
// rounding and the loss stays; with float32 scales it reaches the optimum.
func TestRefineReachesLeastSquares(t *testing.T) {
	const n, k, tokens = 12, 128, 600
	for _, g := range []Grid{
		{Kind: convert.GridSym4, Group: 32, DType: quant.ScaleF16, Search: true},
		{Kind: convert.GridAsym4, Group: 32, DType: quant.ScaleBF16, Search: true},
		{Kind: convert.GridUInt4, Group: 32, DType: quant.ScaleBF16, Search: true},
		{Kind: convert.GridInt8, DType: quant.ScaleBF16},
		{Kind: convert.GridInt8, DType: quant.ScaleF32},
	} {
		t.Run(g.String()+" "+g.DType.String(), func(t *testing.T) {
			w, x := calibData(n, k, tokens, 3)
			h := hessianOf(x, tokens, k)
			hf := make([]float32, len(h))
			for i, v := range h {
				hf[i] = float32(v)
			}
			deq, _, res := solvedDeq(t, w, n, k, h, g, true)
			m := quant.F32Matrix(n, k, w)
			before := outErr(w, deq, n, k, h)
			prev := before
			for sweep := range 4 {
				loss := refine(res, m, hf, g, 1, false)
				got := make([]float32, n*k)
				for r := range n {
					res.Dequantize(g, r, got[r*k:(r+1)*k])
				}
				after := outErr(w, got, n, k, h)
				if want := quant.Compare(w, got); math.Abs(res.Stats.SNRdB()-want.SNRdB()) > 1e-9 || res.Stats.MaxAbs != want.MaxAbs {
					t.Errorf("sweep %d: Stats says %.9g dB, the refitted weights give %.9g dB", sweep, res.Stats.SNRdB(), want.SNRdB())
				}
				if math.Abs(loss-after) > 1e-3*after {
					t.Errorf("sweep %d: refine returned loss %.6g, the result's loss is %.6g", sweep, loss, after)
				}
				if after > prev*(1+1e-6) {
					t.Errorf("sweep %d: loss rose from %.6g to %.6g", sweep, prev, after)
				}
				prev = after
			}
			refine(res, m, hf, g, 20, false)
			var opt float64
			gs := g.group(k)
			c := make([]float32, gs)
			for r := range n {
				cr := make([]float64, k)
				for gi := range k / gs {
					res.centered(g, r, gi, c)
					for j, v := range c {
						cr[gi*gs+j] = float64(v)
					}
				}
				opt += lsParams(w[r*k:(r+1)*k], cr, h, k, gs, g.Kind == convert.GridAsym4)
			}
			got := make([]float32, n*k)
			for r := range n {
				res.Dequantize(g, r, got[r*k:(r+1)*k])
			}
			final := outErr(w, got, n, k, h)
			t.Logf("%s: solve %.5g, after 4 sweeps %.5g, after 24 %.5g, least squares %.5g", g, before, prev, final, opt)
			if g.Kind == convert.GridInt8 && g.DType == quant.ScaleBF16 {
				if final != before {
					t.Errorf("int8 with bf16 scales: loss moved %.6g -> %.6g", before, final)
				}
				return
			}
			if final > opt*1.01 {
				t.Errorf("after 24 sweeps the loss is %.6g, the least-squares optimum %.6g", final, opt)
			}
			if !(final < before) {
				t.Errorf("the refit did not lower the loss: %.6g -> %.6g", before, final)
			}
		})
	}
}

// TestWeightedSolve: importance-weighted parameter searches give a lower
// output error on the calibration rows than the plain searches, on both
// 4-bit grids, with and without act-order (the inputs' channels differ in
// scale by e^N(0,1), as real activations do).
func TestWeightedSolve(t *testing.T) {
	const n, k, tokens = 48, 256, 1000
	w, x := calibData(n, k, tokens, 5)
	h := hessianOf(x, tokens, k)
	for _, g := range []Grid{
		{Kind: convert.GridSym4, Group: 64, DType: quant.ScaleF16, Search: true},
		{Kind: convert.GridAsym4, Group: 64, DType: quant.ScaleBF16, Search: true},
		{Kind: convert.GridUInt4, Group: 64, DType: quant.ScaleBF16, Search: true},
	} {
		for _, act := range []bool{false, true} {
			var f Factor
			if err := Prepare(&f, h, k, DefaultDamp, act); err != nil {
				t.Fatal(err)
			}
			loss := map[bool]float64{}
			for _, weighted := range []bool{false, true} {
				var r Result
				if err := solve(&r, quant.F32Matrix(n, k, w), &f, g, nil, solveOptions{weighted: weighted}); err != nil {
					t.Fatal(err)
				}
				deq := make([]float32, n*k)
				for row := range n {
					r.Dequantize(g, row, deq[row*k:(row+1)*k])
				}
				loss[weighted] = outErr(w, deq, n, k, h)
			}
			t.Logf("%s act=%v: plain %.5g, weighted %.5g (%.3f)", g, act, loss[false], loss[true], loss[true]/loss[false])
			if !(loss[true] < loss[false]) {
				t.Errorf("%s act=%v: weighted search's output error %.5g is not below the plain search's %.5g", g, act, loss[true], loss[false])
			}
		}
	}
}

// TestRecode: the code sweeps of the refit lower the output loss below the
// parameter refit's alone, on both 4-bit grids, and leave codes from
// which no single code's move (to any of its 16 values) lowers it further
// once the last sweep's parameters are held: coordinate descent reached a
// point that is optimal code by code. Int8 codes are not revisited.
func TestRecode(t *testing.T) {
	const n, k, tokens = 8, 128, 600
	for _, g := range []Grid{
		{Kind: convert.GridSym4, Group: 32, DType: quant.ScaleF16, Search: true},
		{Kind: convert.GridAsym4, Group: 32, DType: quant.ScaleBF16, Search: true},
		{Kind: convert.GridUInt4, Group: 32, DType: quant.ScaleBF16, Search: true},
	} {
		t.Run(g.String(), func(t *testing.T) {
			w, x := calibData(n, k, tokens, 7)
			h := hessianOf(x, tokens, k)
			hf := make([]float32, len(h))
			for i, v := range h {
				hf[i] = float32(v)
			}
			m := quant.F32Matrix(n, k, w)
			loss := map[bool]float64{}
			var recoded *Result
			for _, rc := range []bool{false, true} {
				_, _, res := solvedDeq(t, w, n, k, h, g, true)
				refine(res, m, hf, g, 3, rc)
				got := make([]float32, n*k)
				for r := range n {
					res.Dequantize(g, r, got[r*k:(r+1)*k])
				}
				loss[rc] = outErr(w, got, n, k, h)
				recoded = res
			}
			t.Logf("%s: refit %.5g, refit with recode %.5g", g, loss[false], loss[true])
			if !(loss[true] < loss[false]) {
				t.Errorf("recode did not lower the loss: %.6g -> %.6g", loss[false], loss[true])
			}
			// Hold the parameters and sweep the codes alone until nothing moves.
			for range 50 {
				if refineCodesOnly(recoded, m, hf, g) == 0 {
					break
				}
			}
			deq := make([]float32, n*k)
			for r := range n {
				recoded.Dequantize(g, r, deq[r*k:(r+1)*k])
			}
			base := outErr(w, deq, n, k, h)
			for r := range n {
				for c := range k {
					old := recoded.Codes[r*k+c]
					for q := range uint8(16) {
						recoded.Codes[r*k+c] = q
						row := deq[r*k : (r+1)*k]
						recoded.Dequantize(g, r, row)
						if e := outErr(w, deq, n, k, h); e < base*(1-1e-6) {
							t.Fatalf("row %d col %d: code %d -> %d lowers the loss %.8g -> %.8g", r, c, old, q, base, e)
						}
					}
					recoded.Codes[r*k+c] = old
					recoded.Dequantize(g, r, deq[r*k:(r+1)*k])
				}
			}
		})
	}
}

// refineCodesOnly is one recode sweep over every row of res with its
// parameters held; it returns the loss it took off.
func refineCodesOnly(res *Result, m quant.Matrix, hf []float32, g Grid) float64 {
	k := res.K
	var gain float64
	d, gr, deq := make([]float32, k), make([]float32, k), make([]float32, k)
	for n := range res.N {
		copy(d, m.Row(n, d))
		res.Dequantize(g, n, deq)
		for j := range d {
			d[j] -= deq[j]
		}
		kernels.Sgemm(false, false, 1, k, k, 1, d, k, hf, k, 0, gr, k)
		gain += res.recode(g, n, hf, gr)
	}
	return gain
}
