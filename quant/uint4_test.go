package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestUInt4ValueExact: on the integer-zero grid, the Asym4 form's value
// (q-8)*Scale + (8-z)*Scale is (q-z)*Scale exactly, as compressed-tensors
// and vLLM dequantize it, for every code and zero point and scales of both
// parameter dtypes across their range.
func TestUInt4ValueExact(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, dt := range []ScaleDType{ScaleBF16, ScaleF16} {
		for trial := range 2000 {
			s := dt.Round(float32(math.Exp(r.Float64()*30 - 25)))
			if trial%2 == 1 {
				s = dt.Round(float32(r.Float64()))
			}
			if !(s > 0) {
				continue
			}
			for z := range uint8(16) {
				p := UInt4Params(s, z)
				if UInt4Zero(p) != z {
					t.Fatalf("%v scale %g: zero %d reads back as %d", dt, s, z, UInt4Zero(p))
				}
				for q := range uint8(16) {
					want := float32(int32(q)-int32(z)) * s
					if float64(want) != float64(int32(q)-int32(z))*float64(s) {
						t.Fatalf("(q-z)*s not exact in float32 for %g", s)
					}
					if got := p.Value(q); got != want {
						t.Fatalf("%v scale %g z %d q %d: value %g, want %g", dt, s, z, q, got, want)
					}
				}
			}
		}
	}
}

// TestUInt4Range: the plain rule's grid holds 0 and the group's whole
// range (up to half a step at each end), with an integer zero point.
func TestUInt4Range(t *testing.T) {
	for _, c := range []struct {
		w     []float32
		zero  uint8
		scale float32
	}{
		{[]float32{-1.5, 0, 0.25, 6}, 3, 0.5},    // z = round(1.5 / 0.5)
		{[]float32{1, 2, 3, 7.5}, 0, 0.5},        // all positive: 0 joins the range, z = 0
		{[]float32{-7.5, -2, -1, -0.5}, 15, 0.5}, // all negative: z = 15
	} {
		p := UInt4MinMax(c.w, ScaleBF16)
		lo, hi := p.Value(0), p.Value(15)
		if !(lo <= 0 && hi >= 0) {
			t.Errorf("%v: grid [%g, %g] does not hold 0", c.w, lo, hi)
		}
		if p.Scale != c.scale {
			t.Errorf("%v: scale %g, want %g", c.w, p.Scale, c.scale)
		}
		for _, x := range c.w {
			if d := math.Abs(float64(x - p.Value(p.Code(x)))); d > float64(p.Scale)/2 {
				t.Errorf("%v: %g is %g from its value, more than half a step", c.w, x, d)
			}
		}
		if z := UInt4Zero(p); z != c.zero {
			t.Errorf("%v: zero point %d, want %d", c.w, z, c.zero)
		}
	}
}

// TestUInt4SearchWeighted: the weighted search never does worse under its
// weights than the plain rule, and its zero point is an integer.
func TestUInt4SearchWeighted(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	w, h := make([]float32, 64), make([]float32, 64)
	better := 0
	for trial := range 300 {
		for i := range w {
			w[i] = float32(r.NormFloat64()*0.02 + 0.01*float64(trial%3))
			h[i] = float32(math.Exp(r.NormFloat64() * 2))
		}
		plain, searched := UInt4MinMax(w, ScaleBF16), UInt4SearchWeighted(w, h, ScaleBF16)
		if z := UInt4Zero(searched); searched != UInt4Params(searched.Scale, z) {
			t.Fatalf("trial %d: zero %g is not (8 - z) * scale", trial, searched.Zero)
		}
		ep, es := asymErrWeighted(w, h, plain), asymErrWeighted(w, h, searched)
		if es > ep {
			t.Fatalf("trial %d: weighted error %g > plain %g", trial, es, ep)
		}
		if es < ep*0.99 {
			better++
		}
	}
	if better < 150 {
		t.Errorf("weighted search at least 1 %% better on %d of 300 groups, want >= 150", better)
	}
}
