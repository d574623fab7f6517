package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"sparkconv/kernels"
)

// sym4SearchSequential is sym4SearchMagnitude with every error through
// sym4Err and every refit through its own sequential pass (sym4Refit), no
// SIMD: the two must choose the same scale bit for bit.
func sym4SearchSequential(w []float32, dt ScaleDType) Sym4 {
	base := symBase(w)
	if base < tinyRange || base >= hugeRange {
		return Sym4{Scale: symScale(base, 1, dt)}
	}
	cand := func(i int) float32 { return symScale(base, shrinkFactor(i), dt) }
	bestI, bestE := shrinkSearch(func(i int, limit float64) float64 {
		return sym4Err(w, cand(i), limit)
	})
	best := cand(bestI)
	for it := 0; it < lsIters && bestE > 0; it++ {
		s, ok := sym4Refit(w, best, dt)
		if !ok || s == best {
			break
		}
		limit := bestE * (1 - acceptMargin)
		e := sym4Err(w, s, limit)
		if e >= limit {
			break
		}
		best, bestE = s, e
	}
	return Sym4{Scale: best}
}

// searchGroups makes groups of n values: N(0, sigma) with, in some
// groups, outliers, exact zeros, bf16-rounded values or a constant.
func searchGroups(r *rand.Rand, count, n int) [][]float32 {
	out := make([][]float32, count)
	for g := range out {
		w := make([]float32, n)
		sigma := math.Pow(10, -4+4*r.Float64())
		for i := range w {
			w[i] = float32(r.NormFloat64() * sigma)
		}
		switch g % 6 {
		case 1:
			w[r.IntN(n)] *= 40
		case 2:
			for i := range w {
				w[i] = bf16ToF32(f32ToBF16(w[i]))
			}
		case 3:
			for i := 0; i < n; i += 3 {
				w[i] = 0
			}
		case 4:
			w[r.IntN(n)] = float32(sigma * 1e6) // amax/s past the exact-sum bound
		case 5:
			for i := range w {
				w[i] = float32(sigma)
			}
		}
		out[g] = w
	}
	return out
}

func TestSym4SearchSIMDIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{16, 32, 64, 128, 256, 512} {
		for _, dt := range []ScaleDType{ScaleF16, ScaleBF16, ScaleF32} {
			for _, w := range searchGroups(r, 600, n) {
				got, _ := sym4SearchMagnitude(w, dt)
				want := sym4SearchSequential(w, dt)
				if math.Float32bits(got.Scale) != math.Float32bits(want.Scale) {
					t.Fatalf("n=%d %v: scale %g, sequential search %g", n, dt, got.Scale, want.Scale)
				}
			}
		}
	}
}

// errAgrees checks a SIMD error pass against the portable one: the same
// float64 bits when the portable total is within limit, above limit too
// when it is not.
func errAgrees(t *testing.T, what string, got, want, limit float64) {
	t.Helper()
	if want <= limit && math.Float64bits(got) != math.Float64bits(want) || want > limit && !(got > limit) {
		t.Fatalf("%s limit=%g: error %v, portable %v", what, limit, got, want)
	}
}

// TestSym4ErrRefit checks symErr against sym4Err (early exits included:
// the limits cut passes in every block of 4) and symRefit against
// sym4Refit, on groups of every length class.
func TestSym4ErrRefit(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	var sums [2]float64
	if _, simd := kernels.Sym4Sums(make([]float32, 16), 1, &sums); !simd {
		t.Log("no SIMD kernel: checking the portable path against itself")
	}
	for _, n := range []int{16, 32, 48, 100, 128, 256, 272, 512} {
		for _, w := range searchGroups(r, 400, n) {
			amax := math.Float32frombits(absmaxBits(w))
			base := symBase(w)
			for _, p := range []float32{1, 0.8, 0.5, 0.3} {
				s := symScale(base, p, ScaleF16)
				full := sym4Err(w, s, math.Inf(1))
				for _, limit := range []float64{math.Inf(1), full, full * 0.9, full * 0.5, full * 0.1, 0} {
					errAgrees(t, fmt.Sprintf("n=%d s=%g", n, s), symErr(w, s, limit), sym4Err(w, s, limit), limit)
				}
				gs, gok := symRefit(w, amax, s, ScaleF16)
				ws, wok := sym4Refit(w, s, ScaleF16)
				if gok != wok || math.Float32bits(gs) != math.Float32bits(ws) {
					t.Fatalf("n=%d s=%g: refit %v %v, sequential %v %v", n, s, gs, gok, ws, wok)
				}
			}
		}
	}
}

// TestAsym4ErrRefit is TestSym4ErrRefit for the asymmetric grid.
func TestAsym4ErrRefit(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	var exact int
	for _, n := range []int{16, 32, 48, 100, 128, 256, 272, 512} {
		for k, w := range searchGroups(r, 400, n) {
			if k%7 == 6 {
				for i := range w {
					w[i] += 3 * w[0]
				}
			}
			g := newAsymGroup(w, groupRange(w))
			if g.exact {
				exact++
			}
			lo, hi := minMax(w)
			mid, half := lo+(hi-lo)/2, (hi-lo)/2
			for _, f := range []float32{1, 0.8, 0.5, 0.3} {
				h := f * half
				p := asymRange(mid-h, mid+h, ScaleBF16)
				full := asym4Err(w, p, math.Inf(1))
				for _, limit := range []float64{math.Inf(1), full, full * 0.9, full * 0.5, full * 0.1, 0} {
					errAgrees(t, fmt.Sprintf("n=%d %+v", n, p), g.err(p, limit), asym4Err(w, p, limit), limit)
				}
				gp, gok := g.refit(p, ScaleBF16)
				wp, wok := asym4Refit(w, p, ScaleBF16)
				if gok != wok || math.Float32bits(gp.Scale) != math.Float32bits(wp.Scale) || math.Float32bits(gp.Zero) != math.Float32bits(wp.Zero) {
					t.Fatalf("n=%d %+v: refit %+v %v, sequential %+v %v", n, p, gp, gok, wp, wok)
				}
			}
		}
	}
	if exact == 0 {
		t.Error("no group took the SIMD sums")
	}
}

// minMax is the range rule before groupRange: the smallest and largest
// element of a non-empty w, by strict comparisons.
func minMax(w []float32) (lo, hi float32) {
	lo, hi = w[0], w[0]
	for _, x := range w[1:] {
		if x < lo {
			lo = x
		}
		if x > hi {
			hi = x
		}
	}
	return lo, hi
}

// asym4SearchSequential is Asym4Search before the SIMD passes.
func asym4SearchSequential(w []float32, dt ScaleDType) Asym4 {
	lo, hi := minMax(w)
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
	bestI, bestE := shrinkSearch(func(i int, limit float64) float64 {
		return asym4Err(w, cand(i), limit)
	})
	best := cand(bestI)
	for it := 0; it < lsIters && bestE > 0; it++ {
		p, ok := asym4Refit(w, best, dt)
		if !ok || p == best {
			break
		}
		limit := bestE * (1 - acceptMargin)
		e := asym4Err(w, p, limit)
		if e >= limit {
			break
		}
		best, bestE = p, e
	}
	return best
}

func TestAsym4SearchSIMDIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	var exact int
	for _, n := range []int{16, 32, 64, 128, 256, 512} {
		for _, dt := range []ScaleDType{ScaleF16, ScaleBF16, ScaleF32} {
			for g, w := range searchGroups(r, 600, n) {
				if g%7 == 6 { // shifted groups: the zero far from 0
					for i := range w {
						w[i] += 3 * w[0]
					}
				}
				if newAsymGroup(w, groupRange(w)).exact {
					exact++
				}
				got, want := Asym4Search(w, dt), asym4SearchSequential(w, dt)
				if math.Float32bits(got.Scale) != math.Float32bits(want.Scale) || math.Float32bits(got.Zero) != math.Float32bits(want.Zero) {
					t.Fatalf("n=%d %v group %d: %+v, sequential search %+v", n, dt, g, got, want)
				}
			}
		}
	}
	if exact == 0 {
		t.Error("no group took the fused path")
	}
}

// TestQuant4Kernels checks the SIMD quantize-and-measure pass of both
// 4-bit grids against the portable bodies: codes and statistics bit for
// bit, on lengths with every remainder and parameters from the searches.
func TestQuant4Kernels(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	for _, n := range []int{16, 64, 100, 128, 256, 6656 + 16} {
		for g, w := range searchGroups(r, 200, n) {
			sp := Sym4Search(w, ScaleF16)
			ap := Asym4Search(w, ScaleBF16)
			if g%3 == 2 { // parameters that clip
				sp.Scale *= 0.3
				ap.Scale *= 0.3
			}
			got, want := make([]uint8, n), make([]uint8, n)
			var b blockStats
			sym4Blocks(&b, want, w, sp.Scale, 1/sp.Scale)
			if gs := sym4Kernel(got, w, sp.Scale); gs != b.stats(n) || !slices.Equal(got, want) {
				t.Fatalf("sym n=%d group %d: %+v, portable %+v", n, g, gs, b.stats(n))
			}
			b = blockStats{}
			asym4Blocks(&b, want, w, ap, 1/ap.Scale)
			if gs := asym4Kernel(got, w, ap); gs != b.stats(n) || !slices.Equal(got, want) {
				t.Fatalf("asym n=%d group %d: %+v, portable %+v", n, g, gs, b.stats(n))
			}
		}
	}
}
