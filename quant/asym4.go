package quant

import (
	"math"

	"sparkconv/kernels"
)

// Asym4 is one group's parameters on torch's CPU tinygemm int4 grid
// (_weight_int4pack_mm_for_cpu, torchao's tinygemm qparams with a float
// zero): w = (q - 8) * Scale + Zero, q in 0..15.
type Asym4 struct{ Scale, Zero float32 }

// asymMinScale is torchao's eps for the tinygemm scale (clamp(min=1e-6)).
const asymMinScale = 1e-6

// Code returns the nearest code: clamp(round((w - Zero)/Scale) + 8, 0, 15),
// with the division done as the float32 product (w - Zero) * float32(1/Scale)
// rounded half to even. This is torchao's round((w - (Zero - 8*Scale))/Scale)
// except at exact ties, which may resolve either way (both codes equally
// near). torchao itself computes in bf16 when the weight is bf16, which is
// coarser; only the dequantization is fixed by the format.
func (p Asym4) Code(w float32) uint8 { return asymCode(w, p.Zero, 1/p.Scale) }

// Value dequantizes a code in float32: float32(q-8)*Scale + Zero, each
// operation rounded to float32. The AVX-512 kernel fuses the two into one
// FMA on the same fp32 values (bf16 scale and zero widen exactly), so it
// differs from Value by at most one float32 rounding.
func (p Asym4) Value(q uint8) float32 {
	return float32(float32(int32(q)-8)*p.Scale) + p.Zero
}

// Quantize writes the codes of w into dst[:len(w)] and returns the error
// statistics of the dequantized values against w.
func (p Asym4) Quantize(dst []uint8, w []float32) ErrStats {
	return asym4Kernel(dst, w, p)
}

// Dequantize writes Value(codes[i]) into dst[:len(codes)].
func (p Asym4) Dequantize(dst []float32, codes []uint8) {
	dst = dst[:len(codes)]
	for i, q := range codes {
		dst[i] = p.Value(q)
	}
}

// Asym4MinMax is torchao's tinygemm rule (_choose_qparams_affine_tinygemm)
// for the group's range [min, max] (0 need not be inside it):
// scale = max((max-min)/15, 1e-6), zero = min + 8*scale. The scale is
// rounded to dt first and the zero is computed from the rounded scale, then
// rounded to dt (torch rounds after every bf16 operation instead, which can
// differ in the last bit of the zero). A non-empty w is required.
func Asym4MinMax(w []float32, dt ScaleDType) Asym4 {
	r := groupRange(w)
	return asymRange(r.Lo, r.Hi, dt)
}

// asymRange gives the rounded parameters whose grid spans [lo, hi].
func asymRange(lo, hi float32, dt ScaleDType) Asym4 {
	s := clampScale(dt.Round(max((hi-lo)/15, asymMinScale)), dt)
	z := dt.Round(lo + float32(8*s))
	return Asym4{Scale: s, Zero: min(max(z, -dt.maxFinite()), dt.maxFinite())}
}

// Asym4Search chooses parameters minimising the group's squared error:
// the range [min, max] shrunk symmetrically toward its midpoint by
// 1 - i/100, i = 0..79 (the same candidate grid and coarse-to-fine order as
// Sym4Search), then up to three least-squares refits of (scale, zero) to the
// chosen codes. Every candidate is rounded to dt before its error is
// measured and i = 0 is Asym4MinMax, so the result is never worse than it.
// A non-empty w is required.
func Asym4Search(w []float32, dt ScaleDType) Asym4 {
	r := groupRange(w)
	lo, hi := r.Lo, r.Hi
	if hi-lo < tinyRange || max(-lo, hi) >= hugeRange {
		return asymRange(lo, hi, dt)
	}
	mid := lo + (hi-lo)/2
	half := (hi - lo) / 2
	cand := func(i int) Asym4 {
		if i == 0 {
			return asymRange(lo, hi, dt)
		}
		h := float32(shrinkFactor(i) * half)
		return asymRange(mid-h, mid+h, dt)
	}
	g := newAsymGroup(w, r)
	bestI, bestE := shrinkSearch(func(i int, limit float64) float64 {
		return g.err(cand(i), limit)
	})
	best := cand(bestI)
	for it := 0; it < lsIters && bestE > 0; it++ {
		p, ok := g.refit(best, dt)
		if !ok || p == best {
			break
		}
		limit := bestE * (1 - acceptMargin)
		e := g.err(p, limit)
		if e >= limit {
			break
		}
		best, bestE = p, e
	}
	return best
}

// asymGroup is a group under the asymmetric search: its values, Σ w (the
// same for every candidate), and whether the SIMD pass may give the refit
// sums. Those are exact, hence order-free, when no partial sum can round:
// every term w·c is a multiple of 2^(e-23) for e the exponent of the
// smallest nonzero |w|, and is at most 8·amax, so 256 values with
// amax/min|w| < 2^15 stay below 2^53 of those units. Σ w is then exact as
// well (below 2^47 units), so groupRange's order gives asym4Refit's
// sequential sum; it is used only then.
type asymGroup struct {
	w     []float32
	sw    float64
	exact bool
}

// newAsymGroup is the group w with its range r (groupRange(w)).
func newAsymGroup(w []float32, r kernels.Range) asymGroup {
	amax, minNZ := math.Float32frombits(r.AbsMax), float32(math.Inf(1))
	if r.MinNZ != 0 {
		minNZ = math.Float32frombits(r.MinNZ)
	}
	return asymGroup{w: w, sw: r.Sum, exact: len(w) <= 256 && amax < minNZ*0x1p15}
}

// err is asym4Err of p through the SIMD pass where it runs: the same
// total when it is at most limit, and a total above limit otherwise.
func (g asymGroup) err(p Asym4, limit float64) float64 {
	inv := 1 / p.Scale
	total, complete, done, ok := kernels.Asym4Err(g.w, p.Scale, p.Zero, inv, limit)
	if !ok {
		return asym4Err(g.w, p, limit)
	}
	if !complete {
		return total
	}
	for _, x := range g.w[done:] {
		d := float64(x) - float64(p.Value(asymCode(x, p.Zero, inv)))
		total += d * d
	}
	return total
}

// refit is asym4Refit, from the SIMD pass's sums when the group is exact.
func (g asymGroup) refit(p Asym4, dt ScaleDType) (Asym4, bool) {
	if !g.exact {
		return asym4Refit(g.w, p, dt)
	}
	inv := 1 / p.Scale
	var sums [3]float64
	done, ok := kernels.Asym4Sums(g.w, p.Zero, inv, &sums)
	if !ok {
		return asym4Refit(g.w, p, dt)
	}
	swc, scc, sc := sums[0], sums[1], sums[2]
	for _, x := range g.w[done:] {
		c := int64(asymCode(x, p.Zero, inv)) - 8
		swc += float64(float64(x) * float64(c))
		scc += float64(c * c)
		sc += float64(c)
	}
	return asymFit(float64(len(g.w)), sc, scc, g.sw, swc, dt)
}

// asym4Refit fits scale and zero by least squares to the codes that p
// gives w (w ≈ (q-8)*scale + zero), rounded to dt.
func asym4Refit(w []float32, p Asym4, dt ScaleDType) (Asym4, bool) {
	inv := 1 / p.Scale
	var sc, scc int64
	var sw, swc float64
	for _, x := range w {
		c := int64(asymCode(x, p.Zero, inv)) - 8
		sc += c
		scc += c * c
		sw += float64(x)
		swc += float64(float64(x) * float64(c))
	}
	return asymFit(float64(len(w)), float64(sc), float64(scc), sw, swc, dt)
}

// asymFit solves the least-squares scale and zero from the sums of n
// values and their codes. Explicit conversions round every product, so no
// FMA fusion changes the result on any architecture.
func asymFit(n, sc, scc, sw, swc float64, dt ScaleDType) (Asym4, bool) {
	den := float64(n*scc) - float64(sc*sc)
	if den <= 0 {
		return Asym4{}, false
	}
	s := (float64(n*swc) - float64(sc*sw)) / den
	if !(s > 0) {
		return Asym4{}, false
	}
	z := (sw - float64(s*sc)) / n
	rs := clampScale(dt.Round(max(float32(s), asymMinScale)), dt)
	rz := dt.Round(float32(z))
	return Asym4{Scale: rs, Zero: min(max(rz, -dt.maxFinite()), dt.maxFinite())}, true
}

func asymCode(x, z, inv float32) uint8 {
	return uint8(min(max(rint(float32((x-z)*inv)), -8), 7) + 8)
}

func asymLUT(p Asym4) [16]float32 {
	var lut [16]float32
	for c := range lut {
		lut[c] = p.Value(uint8(c))
	}
	return lut
}

// asym4Err is Σ (w - deq(code(w)))² for p, returning early (with a sum
// > limit) once limit is exceeded; see sym4Err.
func asym4Err(w []float32, p Asym4, limit float64) float64 {
	inv, z := 1/p.Scale, p.Zero
	lut := asymLUT(p)
	var total float64
	i := 0
	for ; i+16 <= len(w); i += 16 {
		var e0, e1, e2, e3 float32
		for j := i; j < i+16; j += 4 {
			c := (*[4]float32)(w[j : j+4])
			d0 := c[0] - lut[asymCode(c[0], z, inv)&15]
			d1 := c[1] - lut[asymCode(c[1], z, inv)&15]
			d2 := c[2] - lut[asymCode(c[2], z, inv)&15]
			d3 := c[3] - lut[asymCode(c[3], z, inv)&15]
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
		d := float64(w[i]) - float64(lut[asymCode(w[i], z, inv)&15])
		total += d * d
	}
	return total
}
