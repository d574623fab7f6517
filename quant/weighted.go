package quant

import "math"

// The importance-weighted searches choose a group's parameters by the
// weighted squared error Σ h_j (w_j - deq(code(w_j)))², h_j >= 0 the
// importance of input channel j: the mean square of the activations it
// multiplies (the Hessian's diagonal), as llama.cpp's imatrix and
// llm-compressor's imatrix_mse observer weight it. A channel the inputs
// drive hard gets a small error even if a rarely driven one gets a larger
// one. The candidates are the unweighted searches' (the shrink grid,
// coarse to fine, then least-squares refits, here weighted); the plain
// rule is candidate 0 and the unweighted search's choice is a candidate
// too, so the weighted error is never above either's.

// Sym4SearchWeighted is Sym4Search under importances h (len(h) ==
// len(w)): each sign searched, the lower weighted error kept. With every h
// equal it chooses as Sym4Search does up to the order of float64 sums.
func Sym4SearchWeighted(w, h []float32, dt ScaleDType) Sym4 {
	return chooseSign(w, 0, func(x []float32) (float32, float64) {
		s, e := sym4SearchWeightedMagnitude(x, h, dt)
		return s.Scale, e
	})
}

// sym4SearchWeightedMagnitude is sym4SearchMagnitude under importances h;
// the error it returns is the weighted one.
func sym4SearchWeightedMagnitude(w, h []float32, dt ScaleDType) (Sym4, float64) {
	amax := math.Float32frombits(absmaxBits(w))
	base := symBaseAmax(amax)
	if base < tinyRange || base >= hugeRange || !positive(h) {
		s := symScale(base, 1, dt)
		return Sym4{Scale: s}, symErrWeighted(w, h, s)
	}
	cand := func(i int) float32 { return symScale(base, shrinkFactor(i), dt) }
	bestI, bestE := shrinkSearch(func(i int, limit float64) float64 {
		return symErrWeighted(w, h, cand(i))
	})
	best := cand(bestI)
	for it := 0; it < lsIters && bestE > 0; it++ {
		s, ok := symRefitWeighted(w, h, best, dt)
		if !ok || s == best {
			break
		}
		e := symErrWeighted(w, h, s)
		if e >= bestE*(1-acceptMargin) {
			break
		}
		best, bestE = s, e
	}
	u, _ := sym4SearchMagnitude(w, dt)
	if e := symErrWeighted(w, h, u.Scale); e < bestE {
		best, bestE = u.Scale, e
	}
	return Sym4{Scale: best}, bestE
}

// Asym4SearchWeighted is Asym4Search under importances h (len(h) ==
// len(w)).
func Asym4SearchWeighted(w, h []float32, dt ScaleDType) Asym4 {
	r := groupRange(w)
	lo, hi := r.Lo, r.Hi
	if hi-lo < tinyRange || max(-lo, hi) >= hugeRange || !positive(h) {
		return asymRange(lo, hi, dt)
	}
	mid := lo + (hi-lo)/2
	half := (hi - lo) / 2
	cand := func(i int) Asym4 {
		if i == 0 {
			return asymRange(lo, hi, dt)
		}
		d := float32(shrinkFactor(i) * half)
		return asymRange(mid-d, mid+d, dt)
	}
	bestI, bestE := shrinkSearch(func(i int, limit float64) float64 {
		return asymErrWeighted(w, h, cand(i))
	})
	best := cand(bestI)
	for it := 0; it < lsIters && bestE > 0; it++ {
		p, ok := asymRefitWeighted(w, h, best, dt)
		if !ok || p == best {
			break
		}
		e := asymErrWeighted(w, h, p)
		if e >= bestE*(1-acceptMargin) {
			break
		}
		best, bestE = p, e
	}
	if u := Asym4Search(w, dt); asymErrWeighted(w, h, u) < bestE {
		best = u
	}
	return best
}

// positive says some importance is above zero and none is negative or
// not finite (a group nobody drives has no error to weigh).
func positive(h []float32) bool {
	any := false
	for _, v := range h {
		if !(v >= 0) || math.IsInf(float64(v), 1) {
			return false
		}
		any = any || v > 0
	}
	return any
}

func symErrWeighted(w, h []float32, s float32) float64 {
	inv := 1 / s
	var total float64
	for j, x := range w {
		d := float64(x) - float64(float32(float32(int32(symCode(x, inv))-8)*s))
		total += float64(h[j]) * d * d
	}
	return total
}

// symRefitWeighted is the weighted least-squares scale for the codes s
// gives w: Σ h·w·c / Σ h·c², rounded to dt.
func symRefitWeighted(w, h []float32, s float32, dt ScaleDType) (float32, bool) {
	inv := 1 / s
	var swc, scc float64
	for j, x := range w {
		c := float64(int32(symCode(x, inv)) - 8)
		swc += float64(h[j]) * float64(x) * c
		scc += float64(h[j]) * c * c
	}
	if !(scc > 0) || !(swc > 0) {
		return 0, false
	}
	return clampScale(dt.Round(float32(swc/scc)), dt), true
}

func asymErrWeighted(w, h []float32, p Asym4) float64 {
	inv := 1 / p.Scale
	var total float64
	for j, x := range w {
		d := float64(x) - float64(p.Value(asymCode(x, p.Zero, inv)))
		total += float64(h[j]) * d * d
	}
	return total
}

// asymRefitWeighted fits scale and zero by weighted least squares to the
// codes p gives w.
func asymRefitWeighted(w, h []float32, p Asym4, dt ScaleDType) (Asym4, bool) {
	inv := 1 / p.Scale
	var n, sc, scc, sw, swc float64
	for j, x := range w {
		hj := float64(h[j])
		c := float64(int32(asymCode(x, p.Zero, inv)) - 8)
		n += hj
		sc += hj * c
		scc += hj * c * c
		sw += hj * float64(x)
		swc += hj * float64(x) * c
	}
	return asymFit(n, sc, scc, sw, swc, dt)
}
