package quant

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"sparkconv/kernels"
)

// rangeSequential is groupRange's portable rule, written out: strict
// comparisons from w[0], magnitudes by their bits, Σw in order.
func rangeSequential(w []float32) kernels.Range {
	var r kernels.Range
	r.Lo, r.Hi = minMax(w)
	for _, x := range w {
		a := absBits(x)
		r.AbsMax = max(r.AbsMax, a)
		if a != 0 && (r.MinNZ == 0 || a < r.MinNZ) {
			r.MinNZ = a
		}
		r.Sum += float64(x)
	}
	return r
}

// exactSum is Σw without rounding, then rounded once to float64.
func exactSum(w []float32) float64 {
	var s big.Float
	s.SetPrec(2000)
	for _, x := range w {
		s.Add(&s, new(big.Float).SetFloat64(float64(x)))
	}
	f, _ := s.Float64()
	return f
}

// TestGroupRange checks groupRange (the SIMD kernel where it runs) against
// the sequential rule on the search's groups and on groups with signed
// zeros, subnormals, infinities and NaNs at every position class: Lo and
// Hi equal (a zero's sign aside), the magnitude bits equal, and Σw equal
// to the exact sum whenever newAsymGroup calls the group exact.
func TestGroupRange(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	var groups [][]float32
	for _, n := range []int{1, 7, 16, 17, 32, 100, 128, 255, 256, 512} {
		groups = append(groups, searchGroups(r, 60, n)...)
		for g := range 40 {
			w := make([]float32, n)
			for i := range w {
				w[i] = float32(r.NormFloat64() * 0.02)
				switch r.IntN(16) {
				case 0:
					w[i] = float32(math.Copysign(0, -1))
				case 1:
					w[i] = 0
				case 2:
					w[i] = math.Float32frombits(uint32(r.IntN(1 << 23))) // subnormal
				case 3:
					if g%4 == 1 {
						w[i] = float32(math.Inf(1 - 2*r.IntN(2)))
					}
				case 4:
					if g%4 == 2 {
						w[i] = float32(math.NaN())
					}
				}
			}
			if g%5 == 3 { // non-negative with both zeros: the minimum is a zero
				for i := range w {
					w[i] = float32(math.Abs(float64(w[i])))
					if i%3 == 0 {
						w[i] = float32(math.Copysign(0, float64(1-2*(i%2))))
					}
				}
			}
			if g%5 == 4 {
				w[0] = float32(math.NaN())
			}
			groups = append(groups, w)
		}
	}
	var exact int
	for _, w := range groups {
		got, want := groupRange(w), rangeSequential(w)
		if got.Lo != want.Lo && !(got.Lo != got.Lo && want.Lo != want.Lo) || got.Hi != want.Hi && !(got.Hi != got.Hi && want.Hi != want.Hi) {
			t.Fatalf("n=%d: range [%v, %v], sequential [%v, %v]", len(w), got.Lo, got.Hi, want.Lo, want.Hi)
		}
		if got.AbsMax != want.AbsMax || got.MinNZ != want.MinNZ {
			t.Fatalf("n=%d: magnitudes %#x %#x, sequential %#x %#x", len(w), got.AbsMax, got.MinNZ, want.AbsMax, want.MinNZ)
		}
		if newAsymGroup(w, got).exact {
			exact++
			if got.Sum != exactSum(w) || want.Sum != got.Sum {
				t.Fatalf("n=%d: Σw %v, sequential %v, exact %v", len(w), got.Sum, want.Sum, exactSum(w))
			}
		} else if d := math.Abs(got.Sum - want.Sum); !(d <= 1e-12*math.Abs(want.Sum)+1e-30) && !math.IsNaN(want.Sum) && !math.IsInf(want.Sum, 0) {
			t.Fatalf("n=%d: Σw %v, sequential %v", len(w), got.Sum, want.Sum)
		}
	}
	if exact == 0 {
		t.Error("no exact group")
	}
}

// TestAbsmaxBits checks absmaxBits (SIMD on the whole blocks of 16) against
// the scalar rule, NaN and ±Inf bits included, for every remainder.
func TestAbsmaxBits(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for n := 1; n <= 80; n++ {
		for rep := range 50 {
			w := make([]float32, n)
			for i := range w {
				w[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(20)-10)))
			}
			switch rep % 5 {
			case 1:
				w[r.IntN(n)] = float32(math.NaN())
			case 2:
				w[r.IntN(n)] = float32(math.Inf(-1))
			case 3:
				w[r.IntN(n)] = math.Float32frombits(0xffffffff) // NaN with every bit set
			}
			var want uint32
			for _, x := range w {
				want = max(want, math.Float32bits(x)&0x7fffffff)
			}
			if got := absmaxBits(w); got != want {
				t.Fatalf("n=%d: %#x, want %#x", n, got, want)
			}
		}
	}
}
