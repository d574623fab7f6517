package quant

import (
	"math"

	"sparkconv/kernels"
)

// Sym4 is one group's parameter on the symmetric 4-bit grid of GPTQ
// (sym=true) and vLLM's CPU W4A8 kernel: w = (q - 8) * Scale, q in 0..15.
// The zero point is pinned at 8 (GPTQ v1 stores it as 7). Scale may be
// negative: the levels are then 8..-7 steps instead of -8..7.
type Sym4 struct{ Scale float32 }

// Code returns the nearest code: clamp(round(w/Scale) + 8, 0, 15), with
// w/Scale computed as the float32 product w * float32(1/Scale) and rounded
// half to even (torch.round). At an exact tie of w/Scale the product may
// fall on either side; both codes are then equally near. Every routine of
// this package uses this same product, so codes agree everywhere.
func (p Sym4) Code(w float32) uint8 { return symCode(w, 1/p.Scale) }

// Value dequantizes a code: float32(q-8) * Scale.
func (p Sym4) Value(q uint8) float32 { return float32(float32(int32(q)-8) * p.Scale) }

// Quantize writes the codes of w into dst[:len(w)] and returns the error
// statistics of the dequantized values against w.
func (p Sym4) Quantize(dst []uint8, w []float32) ErrStats {
	return sym4Kernel(dst, w, p.Scale)
}

// Dequantize writes Value(codes[i]) into dst[:len(codes)].
func (p Sym4) Dequantize(dst []float32, codes []uint8) {
	dst = dst[:len(codes)]
	for i, q := range codes {
		dst[i] = p.Value(q)
	}
}

// Sym4Absmax is GPTQ's plain symmetric rule: scale = 2*amax/15 (the
// quantizer's (xmax - xmin)/maxq with xmin = -xmax), rounded to dt, the
// dtype the scales are stored in (fp16 for GPTQ checkpoints). An all-zero
// group takes GPTQ's range [-1, 1], scale 2/15. Unlike GPTQ's quantizer, a
// group with no negative value also uses 2*amax/15 (GPTQ keeps xmin = 0
// there and gets amax/15, which clips the group's top half to 7*scale).
func Sym4Absmax(w []float32, dt ScaleDType) Sym4 {
	return Sym4{Scale: symScale(symBase(w), 1, dt)}
}

// symBase is the unrounded plain scale of w.
func symBase(w []float32) float32 {
	return symBaseAmax(math.Float32frombits(absmaxBits(w)))
}

// symBaseAmax is the unrounded plain scale of a group whose largest
// magnitude is amax.
func symBaseAmax(amax float32) float32 {
	if amax == 0 {
		amax = 1
	}
	return (amax + amax) / 15
}

// symScale is the candidate scale p*base rounded to dt and kept in dt's
// usable range (never zero, never infinite).
func symScale(base, p float32, dt ScaleDType) float32 {
	return clampScale(dt.Round(float32(p*base)), dt)
}

func clampScale(s float32, dt ScaleDType) float32 {
	return min(max(s, dt.minScale()), dt.maxFinite())
}

// Sym4Search chooses the scale, of either sign, minimising the group's
// squared error: the grid's levels are -8..7 steps, so a negative scale
// puts the lone eighth step on the positive side (llama.cpp's Q4_0 divides
// the group's signed extremum by -8 for the same reason). Each sign is
// searched (sym4SearchMagnitude on w and on -w) and the lower error wins;
// a tie keeps the positive scale.
func Sym4Search(w []float32, dt ScaleDType) Sym4 {
	return chooseSign(w, acceptMargin, func(x []float32) (float32, float64) {
		s, e := sym4SearchMagnitude(x, dt)
		return s.Scale, e
	})
}

// chooseSign runs a positive-scale search on w and on -w and returns the
// scale with the lower error, the second negated only when its error is
// lower by the relative margin (acceptMargin for errors summed in float32
// blocks, so that the choice is right in exact arithmetic; 0 for float64
// sums).
func chooseSign(w []float32, margin float64, search func([]float32) (float32, float64)) Sym4 {
	pos, ePos := search(w)
	var buf [256]float32
	flip := buf[:0]
	if len(w) > len(buf) {
		flip = make([]float32, 0, len(w))
	}
	for _, x := range w {
		flip = append(flip, -x)
	}
	neg, eNeg := search(flip)
	if eNeg < ePos*(1-margin) {
		return Sym4{Scale: -neg}
	}
	return Sym4{Scale: pos}
}

// sym4SearchMagnitude chooses the positive scale minimising the group's
// squared error, and returns that error. The candidates are IST-DASLab's MSE grid (quant.py
// find_params with grid=100, maxshrink=0.8): scale_i = round_dt((1 - i/100) * plain), i = 0..79,
// searched coarse to fine (see shrinkSearch), followed by up to three
// least-squares refits of the scale to the chosen codes. Every candidate is
// rounded to dt before its error is measured, and i = 0 is the plain rule,
// so the result is never worse than Sym4Absmax.
func sym4SearchMagnitude(w []float32, dt ScaleDType) (Sym4, float64) {
	amax := math.Float32frombits(absmaxBits(w))
	base := symBaseAmax(amax)
	if base < tinyRange || base >= hugeRange {
		s := symScale(base, 1, dt)
		return Sym4{Scale: s}, symErr(w, s, math.Inf(1))
	}
	cand := func(i int) float32 { return symScale(base, shrinkFactor(i), dt) }
	bestI, bestE := shrinkSearch(func(i int, limit float64) float64 {
		return symErr(w, cand(i), limit)
	})
	best := cand(bestI)
	for it := 0; it < lsIters && bestE > 0; it++ {
		s, ok := symRefit(w, amax, best, dt)
		if !ok || s == best {
			break
		}
		limit := bestE * (1 - acceptMargin)
		e := symErr(w, s, limit)
		if e >= limit {
			break
		}
		best, bestE = s, e
	}
	return Sym4{Scale: best}, bestE
}

// symErr is sym4Err through the SIMD pass where it runs: the same total
// when it is at most limit, and a total above limit otherwise.
func symErr(w []float32, s float32, limit float64) float64 {
	inv := 1 / s
	total, complete, done, ok := kernels.Sym4Err(w, s, inv, limit)
	if !ok {
		return sym4Err(w, s, limit)
	}
	if !complete {
		return total
	}
	for _, x := range w[done:] {
		d := float64(x) - float64(float32(float32(int32(symCode(x, inv))-8)*s))
		total += d * d
	}
	return total
}

// symRefit is sym4Refit, from the SIMD pass's sums when it runs and the
// sums cannot round: then every partial sum is exact and equals the
// sequential sum sym4Refit computes. Terms with c != 0 have |w| >= s/2 (1
// - 2^-23), so they are multiples of 2^(e-25) for e = exponent(s); with
// amax/s < 2^15 and 256 values or fewer no partial sum reaches 2^53 of
// those units.
func symRefit(w []float32, amax, s float32, dt ScaleDType) (float32, bool) {
	inv := 1 / s
	if len(w) > 256 || !(float32(amax*inv) < 0x1p15) {
		return sym4Refit(w, s, dt)
	}
	var sums [2]float64
	done, ok := kernels.Sym4Sums(w, inv, &sums)
	if !ok {
		return sym4Refit(w, s, dt)
	}
	swc, scc := sums[0], sums[1]
	for _, x := range w[done:] {
		c := int64(symCode(x, inv)) - 8
		swc += float64(float64(x) * float64(c))
		scc += float64(c * c)
	}
	if scc == 0 || swc <= 0 {
		return 0, false
	}
	return clampScale(dt.Round(float32(swc/scc)), dt), true
}

// sym4Refit returns the least-squares scale for the codes that scale s
// gives w: Σ w·c / Σ c² with c = q - 8, rounded to dt.
func sym4Refit(w []float32, s float32, dt ScaleDType) (float32, bool) {
	inv := 1 / s
	var swc float64
	var scc int64
	for _, x := range w {
		c := int64(symCode(x, inv)) - 8
		swc += float64(float64(x) * float64(c)) // conversion: no FMA on any arch
		scc += c * c
	}
	if scc == 0 || swc <= 0 {
		return 0, false
	}
	return clampScale(dt.Round(float32(swc/float64(scc))), dt), true
}

func symCode(x, inv float32) uint8 {
	return uint8(min(max(rint(float32(x*inv)), -8), 7) + 8)
}

func symLUT(s float32) [16]float32 {
	var lut [16]float32
	for c := range lut {
		lut[c] = float32(float32(c-8) * s)
	}
	return lut
}

// sym4Err is Σ (w - deq(code(w)))² for scale s. It checks the running sum
// against limit every 16 values and returns early (with a sum > limit) once
// it is exceeded. Partial sums of 16 squares are float32, the total float64.
func sym4Err(w []float32, s float32, limit float64) float64 {
	inv := 1 / s
	lut := symLUT(s)
	var total float64
	i := 0
	for ; i+16 <= len(w); i += 16 {
		var e0, e1, e2, e3 float32
		for j := i; j < i+16; j += 4 {
			c := (*[4]float32)(w[j : j+4])
			d0 := c[0] - lut[symCode(c[0], inv)&15]
			d1 := c[1] - lut[symCode(c[1], inv)&15]
			d2 := c[2] - lut[symCode(c[2], inv)&15]
			d3 := c[3] - lut[symCode(c[3], inv)&15]
			e0 += float32(d0 * d0)
			e1 += float32(d1 * d1)
			e2 += float32(d2 * d2)
			e3 += float32(d3 * d3)
		}
		total += float64((e0 + e1) + (e2 + e3))
		if total > limit {
			return total
		}
	}
	for ; i < len(w); i++ {
		d := float64(w[i]) - float64(lut[symCode(w[i], inv)&15])
		total += d * d
	}
	return total
}
