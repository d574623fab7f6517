package qnn

import (
	"math"

	"sparkconv/kernels"
)

// BlockSearch is what SearchBlocks chose for one weight.
type BlockSearch struct {
	Scales BlockScales
	// Err and AbsmaxErr are the block-diagonal H-weighted errors summed
	// over the blocks, Σ_b (w_b - ŵ_b)ᵀ H_bb (w_b - ŵ_b) (with refine the
	// full ones, Σ_j (w_j - ŵ_j)ᵀ H (w_j - ŵ_j)), for the chosen
	// grid and for AIMET's min-max LPBQ grid (each block's absolute maximum
	// over 7, compressed as lpbq_utils.grouped_dynamic_quantize does:
	// channel scale = largest block scale / 16, integer scale = round(block
	// scale / channel scale) clipped to [1, 16]).
	Err, AbsmaxErr float64
	// MeanClip is the mean over the blocks of 7 * block scale / the
	// block's absolute maximum.
	MeanClip float64
}

// LPBQ's widths: 4-bit codes decompressed to 8 bits, so integer scales
// in [1, 16].
const (
	lpbqCompressedBW = 4
	lpbqBW           = 8
	lpbqIntTop       = 1 << (lpbqBW - lpbqCompressedBW)
)

// SearchBlocks chooses the LPBQ grid of a MatMul weight w [k, n] in blocks
// of block input rows by the error it causes in the MatMul's output, with
// h [k*k] = Σ x xᵀ over the MatMul's inputs, each block weighted by its
// diagonal block H_bb (the cross-block terms of H are left out, so each
// block is chosen on its own). First each block's float scale c absmax/7
// is searched over c = 1.00 .. 0.50 as SearchScales does; then, for two
// channel scales (the largest searched block scale / 16, and the largest
// block absmax / (7 * 16), AIMET's), every block's integer scale 1..16 is
// tried on the exact LPBQ grid and the best kept, and each channel keeps
// the channel scale whose blocks err least. AIMET's min-max grid is among
// the grids tried, so Err is never above AbsmaxErr.
//
// With refine, a pass of coordinate descent over the blocks then rechooses
// each block's integer scale by its channel's full H-weighted error, the
// cross-block terms included (refine), and Err and AbsmaxErr are the full
// errors (w_j - ŵ_j)ᵀ H (w_j - ŵ_j) summed over the channels; a channel
// whose result errs more than AIMET's min-max grid takes AIMET's, so Err
// is again never above AbsmaxErr.
func SearchBlocks(w []float32, k, n int, h []float64, block int, refine bool) BlockSearch {
	s := &blockSearcher{w: w, k: k, n: n, h: h, block: block, nb: k / block}
	s.init()
	free := s.searchFree()
	aimetPC := s.channelScales(s.absmaxScales())
	aimet := s.aimetInts(aimetPC)
	res := BlockSearch{AbsmaxErr: sum(s.evalLPBQ(aimetPC, aimet))}
	best := s.bestInts(aimetPC)
	alt := s.bestInts(s.channelScales(free))
	for j := range n {
		if alt.channelErr(j, s.nb, n) < best.channelErr(j, s.nb, n) {
			best.pc[j] = alt.pc[j]
			for b := range s.nb {
				best.ints[b*n+j], best.errs[b*n+j] = alt.ints[b*n+j], alt.errs[b*n+j]
			}
		}
	}
	res.Err = sum(best.errs)
	if refine {
		res.Err, res.AbsmaxErr = s.refine(best, aimetPC, aimet)
	}
	res.Scales = BlockScales{K: k, N: n, Block: block, CompressedBW: lpbqCompressedBW, BW: lpbqBW, Scale: best.pc, Int: make([]int32, n*s.nb)}
	var clips float64
	for b := range s.nb {
		for j := range n {
			res.Scales.Int[j*s.nb+b] = best.ints[b*n+j]
			clips += s.clipOf(res.Scales.BlockScale(j, b), b*n+j)
		}
	}
	res.MeanClip = clips / float64(n*s.nb)
	return res
}

// blockSearcher holds one weight's search state; per-block arrays are
// [nb][n], block-major.
type blockSearcher struct {
	w            []float32
	k, n, block  int
	nb           int
	h            []float64
	absmax       []float64 // [nb][n]
	e, he, errs  []float64
	bestRatioErr []float64
}

func (s *blockSearcher) init() {
	s.absmax = make([]float64, s.nb*s.n)
	for r := range s.k {
		b := r / s.block
		for j := range s.n {
			s.absmax[b*s.n+j] = math.Max(s.absmax[b*s.n+j], math.Abs(float64(s.w[r*s.n+j])))
		}
	}
	s.e, s.he, s.errs = make([]float64, s.k*s.n), make([]float64, s.k*s.n), make([]float64, s.nb*s.n)
}

// clipOf is 7 * scale / the block's absmax (1 for an all-zero block).
func (s *blockSearcher) clipOf(scale float64, i int) float64 {
	if s.absmax[i] == 0 {
		return 1
	}
	return scale * float64(int(1)<<(lpbqCompressedBW-1)-1) / s.absmax[i]
}

// blockErrs turns s.e into s.errs: each block's e_bᵀ H_bb e_b per channel.
func (s *blockSearcher) blockErrs() []float64 {
	k, n, bs := s.k, s.n, s.block
	for b := range s.nb {
		r0 := b * bs
		kernels.Dgemm(false, false, bs, n, bs, 1, s.h[r0*k+r0:], k, s.e[r0*n:], n, 0, s.he[r0*n:], n)
	}
	clear(s.errs)
	for r := range k {
		row := (r / bs) * n
		for j := range n {
			s.errs[row+j] += s.e[r*n+j] * s.he[r*n+j]
		}
	}
	return s.errs
}

// evalFree is every block's error under free float block scales sc [nb][n]
// (codes q in [-8, 7], dequantized q * scale in float32).
func (s *blockSearcher) evalFree(sc []float32) []float64 {
	lo, hi := -math.Exp2(lpbqCompressedBW-1), math.Exp2(lpbqCompressedBW-1)-1
	kernels.Parallel(s.k, func(r0, r1 int) {
		for r := r0; r < r1; r++ {
			row := (r / s.block) * s.n
			for j := range s.n {
				v, sj := s.w[r*s.n+j], sc[row+j]
				q := math.Max(lo, math.Min(hi, math.RoundToEven(float64(v)/float64(sj))))
				s.e[r*s.n+j] = float64(v) - float64(float32(q)*sj)
			}
		}
	})
	return s.blockErrs()
}

// evalLPBQ is every block's error on the LPBQ grid of channel scales pc
// and integer scales ints [nb][n], dequantized as BlockScales does.
func (s *blockSearcher) evalLPBQ(pc []float32, ints []int32) []float64 {
	s.fillLPBQ(pc, ints, 0, s.k)
	return s.blockErrs()
}

// fillLPBQ sets rows lo..hi of s.e to w - ŵ on the LPBQ grid of channel
// scales pc and integer scales ints [nb][n].
func (s *blockSearcher) fillLPBQ(pc []float32, ints []int32, lo, hi int) {
	kernels.Parallel(hi-lo, func(r0, r1 int) {
		for r := lo + r0; r < lo+r1; r++ {
			row := (r / s.block) * s.n
			for j := range s.n {
				v, i := s.w[r*s.n+j], ints[row+j]
				c := lpbqCode(v, float64(pc[j])*float64(i), i, lpbqCompressedBW)
				s.e[r*s.n+j] = float64(v) - float64(float32(c)*pc[j])
			}
		}
	})
}

// searchFree searches each block's float scale c absmax/7 over c = 1.00 ..
// 0.50 (every fifth ratio, then the four on either side of the best) and
// returns the chosen scales [nb][n].
func (s *blockSearcher) searchFree() []float32 {
	m := s.nb * s.n
	best, bestErr, step := make([]int, m), make([]float64, m), make([]int, m)
	sc := make([]float32, m)
	try := func(first bool) {
		for i := range sc {
			sc[i] = SymmetricScale((1-float64(step[i])/100)*s.absmax[i], lpbqCompressedBW)
		}
		for i, v := range s.evalFree(sc) {
			if first || v < bestErr[i] {
				best[i], bestErr[i] = step[i], v
			}
		}
	}
	for i := 0; i <= SearchSteps; i += searchCoarse {
		for x := range step {
			step[x] = i
		}
		try(i == 0)
	}
	coarse := append([]int(nil), best...)
	for d := -searchCoarse + 1; d < searchCoarse; d++ {
		if d == 0 {
			continue
		}
		for x := range step {
			step[x] = min(max(coarse[x]+d, 0), SearchSteps)
		}
		try(false)
	}
	for i := range sc {
		sc[i] = SymmetricScale((1-float64(best[i])/100)*s.absmax[i], lpbqCompressedBW)
	}
	return sc
}

// absmaxScales are the blocks' min-max scales absmax/7 [nb][n].
func (s *blockSearcher) absmaxScales() []float32 {
	sc := make([]float32, len(s.absmax))
	for i, a := range s.absmax {
		sc[i] = SymmetricScale(a, lpbqCompressedBW)
	}
	return sc
}

// channelScales are per channel the largest block scale / 16
// (lpbq_utils._get_per_group_scale_factor).
func (s *blockSearcher) channelScales(sc []float32) []float32 {
	pc := make([]float32, s.n)
	for b := range s.nb {
		for j := range s.n {
			pc[j] = max(pc[j], sc[b*s.n+j])
		}
	}
	for j := range pc {
		pc[j] /= lpbqIntTop
	}
	return pc
}

// aimetInts are AIMET's integer scales for channel scales pc: each block's
// min-max scale over pc, rounded (half to even, as numpy) and clipped to
// [1, 16].
func (s *blockSearcher) aimetInts(pc []float32) []int32 {
	sc := s.absmaxScales()
	ints := make([]int32, len(sc))
	for b := range s.nb {
		for j := range s.n {
			i := b*s.n + j
			ints[i] = int32(min(max(math.RoundToEven(float64(sc[i])/float64(pc[j])), 1), lpbqIntTop))
		}
	}
	return ints
}

// lpbqChoice is a grid on one set of channel scales: each block's best
// integer scale and its error.
type lpbqChoice struct {
	pc   []float32
	ints []int32   // [nb][n]
	errs []float64 // [nb][n]
}

func (c lpbqChoice) channelErr(j, nb, n int) float64 {
	var t float64
	for b := range nb {
		t += c.errs[b*n+j]
	}
	return t
}

// bestInts tries every integer scale 1..16 on every block under channel
// scales pc and keeps each block's best.
func (s *blockSearcher) bestInts(pc []float32) lpbqChoice {
	m := s.nb * s.n
	c := lpbqChoice{pc: append([]float32(nil), pc...), ints: make([]int32, m), errs: make([]float64, m)}
	try := make([]int32, m)
	for i := int32(1); i <= lpbqIntTop; i++ {
		for x := range try {
			try[x] = i
		}
		for x, v := range s.evalLPBQ(pc, try) {
			if i == 1 || v < c.errs[x] {
				c.ints[x], c.errs[x] = i, v
			}
		}
	}
	return c
}

func sum(v []float64) float64 {
	var t float64
	for _, x := range v {
		t += x
	}
	return t
}

// refine passes once over the blocks in order, choosing each block's
// integer scale (1..16, the channel scales kept) by the full H-weighted
// error of its channel with the other blocks' errors as they stand
// (coordinate descent: no channel's error rises). Each channel then keeps
// the refined grid or AIMET's min-max one (pc0, ints0), whichever errs
// less in full. It returns the full errors of the result and of AIMET's
// grid, Σ_j (w_j - ŵ_j)ᵀ H (w_j - ŵ_j).
func (s *blockSearcher) refine(c lpbqChoice, pc0 []float32, ints0 []int32) (float64, float64) {
	k, n, bs := s.k, s.n, s.block
	aimetErr := s.fullErrs(pc0, ints0)
	s.fillLPBQ(c.pc, c.ints, 0, k)
	d := append([]float64(nil), s.e...)
	g := make([]float64, k*n)
	kernels.Dgemm(false, false, k, n, k, 1, s.h, k, d, n, 0, g, n)
	cross, hd := make([]float64, bs*n), make([]float64, bs*n)
	bestF, cur := make([]float64, n), make([]float64, n)
	try := make([]int32, s.nb*n)
	copy(try, c.ints)
	for b := range s.nb {
		r0 := b * bs
		db := d[r0*n : (r0+bs)*n]
		kernels.Dgemm(false, false, bs, n, bs, 1, s.h[r0*k+r0:], k, db, n, 0, hd, n)
		for x := range cross {
			cross[x] = g[r0*n+x] - hd[x]
		}
		s.blockObjective(db, hd, cross, bestF)
		for i := int32(1); i <= lpbqIntTop; i++ {
			for j := range n {
				try[b*n+j] = i
			}
			s.fillLPBQ(c.pc, try, r0, r0+bs)
			eb := s.e[r0*n : (r0+bs)*n]
			kernels.Dgemm(false, false, bs, n, bs, 1, s.h[r0*k+r0:], k, eb, n, 0, hd, n)
			s.blockObjective(eb, hd, cross, cur)
			for j := range n {
				if cur[j] < bestF[j] {
					bestF[j], c.ints[b*n+j] = cur[j], i
				}
			}
		}
		copy(try[b*n:(b+1)*n], c.ints[b*n:(b+1)*n])
		s.fillLPBQ(c.pc, try, r0, r0+bs)
		delta := hd // reused: the change of block b's error
		for x := range delta {
			delta[x] = s.e[r0*n+x] - db[x]
		}
		kernels.Dgemm(false, false, k, n, bs, 1, s.h[r0:], k, delta, n, 1, g, n)
		copy(db, s.e[r0*n:(r0+bs)*n])
	}
	refined := s.fullErrs(c.pc, c.ints)
	var total, total0 float64
	for j := range n {
		total0 += aimetErr[j]
		if aimetErr[j] < refined[j] {
			refined[j] = aimetErr[j]
			c.pc[j] = pc0[j]
			for b := range s.nb {
				c.ints[b*n+j] = ints0[b*n+j]
			}
		}
		total += refined[j]
	}
	return total, total0
}

// blockObjective is per channel d_bᵀ (H_bb d_b + 2 cross): block b's part
// of the channel's full error, less what does not depend on d_b.
func (s *blockSearcher) blockObjective(db, hd, cross []float64, out []float64) {
	clear(out)
	for r := range s.block {
		for j := range s.n {
			x := r*s.n + j
			out[j] += db[x] * (hd[x] + 2*cross[x])
		}
	}
}

// fullErrs is per channel (w_j - ŵ_j)ᵀ H (w_j - ŵ_j) on the LPBQ grid.
func (s *blockSearcher) fullErrs(pc []float32, ints []int32) []float64 {
	s.fillLPBQ(pc, ints, 0, s.k)
	kernels.Dgemm(false, false, s.k, s.n, s.k, 1, s.h, s.k, s.e, s.n, 0, s.he, s.n)
	out := make([]float64, s.n)
	for x, v := range s.e {
		out[x%s.n] += v * s.he[x]
	}
	return out
}
