package quant

import (
	"math"

	"sparkconv/kernels"
)

// The integer-zero asymmetric 4-bit grid of compressed-tensors'
// pack-quantized format (symmetric: false) and of vLLM's uint4 kernels:
// w = (q - z) * Scale with q and the group's zero point z both in 0..15.
// Its parameters are carried as an Asym4 whose Zero is (8 - z) * Scale,
// so every Asym4 routine (codes, values, kernels, packing of codes) serves
// it unchanged: (q - 8) * Scale + (8 - z) * Scale is (q - z) * Scale
// exactly in float32 for a scale with at most 11 significant bits (fp16 or
// bf16), since both terms and their sum are multiples of the scale's last
// bit below 2^24 of them. Only the parameter rules differ: the zero is an
// integer, so the range always holds 0 (as compressed-tensors' observers
// make it) and a refit moves the scale alone.

// UInt4Zero is the integer zero point z of parameters on the
// integer-zero grid (Zero = (8 - z) * Scale).
func UInt4Zero(p Asym4) uint8 {
	z := 8 - math.Round(float64(p.Zero)/float64(p.Scale))
	return uint8(min(max(z, 0), 15))
}

// UInt4Params are the parameters of scale s (already in its dtype) and
// zero point z.
func UInt4Params(s float32, z uint8) Asym4 {
	return Asym4{Scale: s, Zero: float32(8-int32(z)) * s}
}

// uint4Range gives the rounded parameters whose grid spans [lo, hi] with 0
// inside: scale = (hi - lo) / 15, z = round(-lo / scale) in 0..15
// (compressed-tensors' calculate_qparams for an asymmetric int4 group).
func uint4Range(lo, hi float32, dt ScaleDType) Asym4 {
	lo, hi = min(lo, 0), max(hi, 0)
	// In float64, and at most a sixteenth of the largest finite value, so
	// that every (q - z) * scale (|q - z| <= 15) and the zero stay finite
	// for the absurd ranges the searches leave to this rule.
	d := min(max((float64(hi)-float64(lo))/15, asymMinScale), float64(dt.maxFinite())/16)
	s := clampScale(dt.Round(float32(d)), dt)
	z := min(max(math.Round(float64(-lo)/float64(s)), 0), 15)
	return UInt4Params(s, uint8(z))
}

// UInt4MinMax is the plain rule: the group's range with 0 inside it.
// A non-empty w is required.
func UInt4MinMax(w []float32, dt ScaleDType) Asym4 {
	r := groupRange(w)
	return uint4Range(r.Lo, r.Hi, dt)
}

// UInt4Search chooses parameters minimising the group's squared error:
// the range [min, max] (0 inside) shrunk toward 0 by 1 - i/100, i =
// 0..79 (IST-DASLab's asymmetric shrink, the same candidate order as the
// other searches), then up to three rounds of least-squares refits of the
// scale for the zero point and its two neighbours, the best kept. i = 0 is UInt4MinMax, so the result is never
// worse than it. A non-empty w is required.
func UInt4Search(w []float32, dt ScaleDType) Asym4 {
	return UInt4SearchWeighted(w, nil, dt)
}

// UInt4SearchWeighted is UInt4Search under importances h (len(h) ==
// len(w); nil: unweighted).
func UInt4SearchWeighted(w, h []float32, dt ScaleDType) Asym4 {
	r := groupRange(w)
	lo, hi := min(r.Lo, 0), max(r.Hi, 0)
	if hi-lo < tinyRange || max(-lo, hi) >= hugeRange || h != nil && !positive(h) {
		return uint4Range(lo, hi, dt)
	}
	cand := func(i int) Asym4 {
		f := shrinkFactor(i)
		return uint4Range(lo*f, hi*f, dt)
	}
	g := newAsymGroup(w, r)
	errOf := func(p Asym4, limit float64) float64 {
		if h == nil {
			return g.err(p, limit)
		}
		return asymErrWeighted(w, h, p)
	}
	bestI, bestE := shrinkSearch(func(i int, limit float64) float64 { return errOf(cand(i), limit) })
	best := cand(bestI)
	for it := 0; it < lsIters && bestE > 0; it++ {
		improved := false
		z := int(UInt4Zero(best))
		for _, nz := range []int{z, z - 1, z + 1} { // the zero held, then one step either way
			if nz < 0 || nz > 15 {
				continue
			}
			p, ok := uint4Refit(g, h, UInt4Params(best.Scale, uint8(nz)), dt)
			if !ok || p == best {
				continue
			}
			limit := bestE * (1 - acceptMargin)
			if e := errOf(p, limit); e < limit {
				best, bestE, improved = p, e, true
			}
		}
		if !improved {
			break
		}
	}
	return best
}

// uint4Refit is the (weighted) least-squares scale for the codes p gives
// w, the zero point held: Σ h·w·c / Σ h·c² with c = q - z, rounded to dt.
// Unweighted, the sums come from the codes centred on 8 (c8 = q - 8,
// c = c8 + d with d = 8 - z: Σ w·c = Σ w·c8 + d Σ w, Σ c² = Σ c8² +
// 2d Σ c8 + d² n), through the SIMD pass where the group is exact (see
// asymGroup), so every kernel family gives the same scale.
func uint4Refit(g asymGroup, h []float32, p Asym4, dt ScaleDType) (Asym4, bool) {
	inv, z := 1/p.Scale, UInt4Zero(p)
	var swc, scc float64
	if h == nil {
		var sums [3]float64 // Σ w·c8, Σ c8², Σ c8
		done, sw := 0, g.sw
		if g.exact {
			done, _ = kernels.Asym4Sums(g.w, p.Zero, inv, &sums)
		} else { // Σ w in order: groupRange's is order-free only when exact
			sw = 0
			for _, x := range g.w {
				sw += float64(x)
			}
		}
		for _, x := range g.w[done:] {
			c := int64(asymCode(x, p.Zero, inv)) - 8
			sums[0] += float64(float64(x) * float64(c))
			sums[1] += float64(c * c)
			sums[2] += float64(c)
		}
		d := 8 - float64(z)
		swc = sums[0] + float64(d*sw)
		scc = sums[1] + float64(2*d*sums[2]) + float64(d*d*float64(len(g.w)))
	} else {
		for j, x := range g.w {
			c := float64(int32(asymCode(x, p.Zero, inv)) - int32(z))
			swc += float64(h[j]) * float64(x) * c
			scc += float64(h[j]) * c * c
		}
	}
	if !(scc > 0) || !(swc > 0) {
		return Asym4{}, false
	}
	return UInt4Params(clampScale(dt.Round(max(float32(swc/scc), asymMinScale)), dt), z), true
}
