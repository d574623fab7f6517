package quant

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

const u7 = 0x1p-7 // 2^-7: a scale every dtype stores exactly

func TestInt8Table(t *testing.T) {
	tests := []struct {
		name      string
		w         []float32
		dt        ScaleDType
		wantScale float32
		wantCodes []int8
	}{
		{
			// amax = 127.5 * 2^-7, so scale = 2^-7 exactly and w/scale is
			// exact: ties show torch.round's half-to-even, +127.5 clamps.
			name:      "ties to even and clamp",
			w:         []float32{127.5 * u7, -127.5 * u7, 2.5 * u7, 3.5 * u7, -0.5 * u7, 1.5 * u7, 0},
			dt:        ScaleBF16,
			wantScale: u7,
			wantCodes: []int8{127, -128, 2, 4, 0, 2, 0},
		},
		{
			// The scale is rounded to bf16 before codes are chosen:
			// 1/127.5 = 0.0078431... -> bf16 0.00787353515625, so 1.0 maps to
			// round(127.007) = 127.
			name:      "codes use the stored bf16 scale",
			w:         []float32{1, -1, 0.5},
			dt:        ScaleBF16,
			wantScale: 0.00787353515625,
			wantCodes: []int8{127, -127, 64},
		},
		{
			// compressed-tensors replaces a zero scale by finfo(dtype).eps.
			name:      "all zero row",
			w:         []float32{0, 0, 0},
			dt:        ScaleBF16,
			wantScale: 0x1p-7,
			wantCodes: []int8{0, 0, 0},
		},
		{
			name:      "all zero row fp16",
			w:         []float32{0, 0},
			dt:        ScaleF16,
			wantScale: 0x1p-10,
			wantCodes: []int8{0, 0},
		},
	}
	for _, tc := range tests {
		p := Int8Absmax(tc.w, tc.dt)
		if p.Scale != tc.wantScale {
			t.Errorf("%s: scale = %v, want %v", tc.name, p.Scale, tc.wantScale)
		}
		codes := make([]int8, len(tc.w))
		p.Quantize(codes, tc.w)
		if !slices.Equal(codes, tc.wantCodes) {
			t.Errorf("%s: codes = %v, want %v", tc.name, codes, tc.wantCodes)
		}
		for i, w := range tc.w {
			if c := p.Code(w); c != codes[i] {
				t.Errorf("%s: Code(%v) = %d, Quantize gave %d", tc.name, w, c, codes[i])
			}
		}
	}
}

func TestInt8Bytes(t *testing.T) {
	got := Int8Bytes([]int8{-128, -1, 0, 1, 127})
	if want := []byte{0x80, 0xFF, 0x00, 0x01, 0x7F}; !slices.Equal(got, want) {
		t.Errorf("Int8Bytes = % x, want % x", got, want)
	}
	if len(Int8Bytes(nil)) != 0 {
		t.Error("Int8Bytes(nil) not empty")
	}
}

// TestInt8CodeIsExactDivision checks the reciprocal shortcut against
// round-half-even of the correctly rounded float32 quotient, on random
// values and on values placed right around the half-integer ties.
func TestInt8CodeIsExactDivision(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ref := func(w, s float32) int8 {
		return int8(min(max(math.RoundToEven(float64(w/s)), -128), 127))
	}
	for i := 0; i < 300000; i++ {
		s := bf16ToF32(f32ToBF16(float32(math.Exp(r.Float64()*20 - 15))))
		var w float32
		if i%2 == 0 {
			w = float32((r.Float64()*2 - 1) * 130 * float64(s))
		} else { // next to a tie (k + 0.5) * s
			k := float64(r.IntN(260) - 130)
			w = float32((k + 0.5) * float64(s))
			for n := r.IntN(5); n > 0; n-- {
				w = math.Nextafter32(w, float32(r.Float64()*2-1))
			}
		}
		if got, want := (Int8{Scale: s}).Code(w), ref(w, s); got != want {
			t.Fatalf("Code(%v) with scale %v = %d, want %d (w/s = %v)", w, s, got, want, w/s)
		}
	}
}

func TestInt8RangeAndSNR(t *testing.T) {
	const n, k = 256, 2048
	w := gaussian(n*k, 0.02, 5)
	var res Int8Result
	if err := QuantizeInt8(&res, F32Matrix(n, k, w), ScaleBF16); err != nil {
		t.Fatal(err)
	}
	for row := 0; row < n; row++ {
		codes := res.Codes[row*k : (row+1)*k]
		lo, hi := slices.Min(codes), slices.Max(codes)
		// amax/scale is 127.5 up to the bf16 rounding of the scale, so the
		// extreme of every row lands on the edge of the int8 range.
		if max(-int(lo), int(hi)) < 127 {
			t.Fatalf("row %d uses codes [%d, %d]; the row's absmax should reach ±127", row, lo, hi)
		}
	}
	// Uniform rounding error s²/12 with s = amax/127.5 and amax ≈ 3.5σ for
	// 2048 Gaussian values gives about 10*log10(12*127.5²/3.5²) ≈ 42 dB
	// (the real model's heavier-tailed rows measured 36.9-40.9 dB).
	snr := res.Stats.SNRdB()
	t.Logf("int8 per-channel SNR on N(0, 0.02) [%d, %d]: %.2f dB, max abs err %.3g", n, k, snr, res.Stats.MaxAbs)
	if snr < 40 || snr > 42.5 {
		t.Errorf("int8 per-channel SNR = %.2f dB, want 40..42.5", snr)
	}
}

func TestSym4Table(t *testing.T) {
	// amax 7.5 -> scale 2*7.5/15 = 1 exactly.
	w := []float32{7.5, -7.5, 0.5, 1.5, -2.5, 0, 6.9, -7.4}
	p := Sym4Absmax(w, ScaleF16)
	if p.Scale != 1 {
		t.Fatalf("scale = %v, want 1", p.Scale)
	}
	codes := make([]uint8, len(w))
	p.Quantize(codes, w)
	// 7.5 -> round(7.5)=8 -> 16 clamps to 15 (the positive extreme is 7*scale);
	// -7.5 -> -8 -> 0; 0.5 -> 0 (half to even) -> 8; 1.5 -> 2 -> 10;
	// -2.5 -> -2 -> 6; 6.9 -> 7 -> 15; -7.4 -> -7 -> 1.
	want := []uint8{15, 0, 8, 10, 6, 8, 15, 1}
	if !slices.Equal(codes, want) {
		t.Errorf("codes = %v, want %v", codes, want)
	}
	if v := p.Value(15); v != 7 {
		t.Errorf("Value(15) = %v, want 7", v)
	}

	// All-zero group: GPTQ's [-1, 1] range, scale fp16(2/15), codes 8.
	z := Sym4Absmax([]float32{0, 0, 0, 0}, ScaleF16)
	if z.Scale != 0.13330078125 {
		t.Errorf("all-zero scale = %v, want fp16(2/15) = 0.13330078125", z.Scale)
	}
	if z.Code(0) != 8 {
		t.Errorf("all-zero code = %d, want 8", z.Code(0))
	}

	// fp16 rounding before codes: amax 0.1 -> 2*0.1/15 = 0.013333 -> fp16.
	g := []float32{0.1, -0.05, 0.0334}
	ps := Sym4Absmax(g, ScaleF16)
	if want := ScaleF16.Round(0.2 / 15); ps.Scale != want {
		t.Errorf("scale = %v, want fp16 %v", ps.Scale, want)
	}
}

func TestAsym4Table(t *testing.T) {
	// [min, max] = [-1, 0.875]: scale 0.125, zero -1 + 8*0.125 = 0, exact.
	w := []float32{-1, 0.875, 0.0625, 0.1875, -0.5, 0.3}
	p := Asym4MinMax(w, ScaleBF16)
	if p.Scale != 0.125 || p.Zero != 0 {
		t.Fatalf("params = %+v, want scale 0.125 zero 0", p)
	}
	codes := make([]uint8, len(w))
	p.Quantize(codes, w)
	// -1 -> -8 -> 0; 0.875 -> 7 -> 15; 0.0625 -> 0.5 -> 0 (even) -> 8;
	// 0.1875 -> 1.5 -> 2 -> 10; -0.5 -> -4 -> 4; 0.3 -> 2.4 -> 2 -> 10.
	want := []uint8{0, 15, 8, 10, 4, 10}
	if !slices.Equal(codes, want) {
		t.Errorf("codes = %v, want %v", codes, want)
	}
	if v := p.Value(0); v != -1 {
		t.Errorf("Value(0) = %v, want -1", v)
	}

	// A constant group: scale clamps to bf16(1e-6), zero = the value.
	c := Asym4MinMax([]float32{0.5, 0.5, 0.5}, ScaleBF16)
	if c.Scale != ScaleBF16.Round(1e-6) || c.Zero != 0.5 {
		t.Errorf("constant group params = %+v, want scale bf16(1e-6), zero 0.5", c)
	}
	if c.Code(0.5) != 8 || c.Value(8) != 0.5 {
		t.Errorf("constant group: code %d value %v, want 8 and 0.5", c.Code(0.5), c.Value(8))
	}

	// Both parameters are bf16 values and the zero is min + 8*scale.
	g := gaussian(128, 0.02, 9)
	q := Asym4MinMax(g, ScaleBF16)
	lo, hi := slices.Min(g), slices.Max(g)
	if ScaleBF16.Round(q.Scale) != q.Scale || ScaleBF16.Round(q.Zero) != q.Zero {
		t.Errorf("params %+v are not bf16 values", q)
	}
	if want := ScaleBF16.Round((hi - lo) / 15); q.Scale != want {
		t.Errorf("scale = %v, want bf16((max-min)/15) = %v", q.Scale, want)
	}
	if want := ScaleBF16.Round(lo + 8*q.Scale); q.Zero != want {
		t.Errorf("zero = %v, want bf16(min + 8*scale) = %v", q.Zero, want)
	}
}

// gridCase abstracts one group's 4-bit parameters for table tests.
type gridCase struct {
	name       string
	code       func(float32) uint8
	value      func(uint8) float32
	quantize   func(dst []uint8, w []float32) ErrStats
	dequantize func(dst []float32, codes []uint8)
}

func sym4Case(p Sym4) gridCase {
	return gridCase{"sym4", p.Code, p.Value, p.Quantize, p.Dequantize}
}

func asym4Case(p Asym4) gridCase {
	return gridCase{"asym4", p.Code, p.Value, p.Quantize, p.Dequantize}
}

// TestCodesAreNearest: for random parameters every code is a nearest grid
// point of its value (ties either way), and Code, Quantize, Value and
// Dequantize agree, as do Quantize's statistics with Compare's.
func TestCodesAreNearest(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	w := make([]float32, 64)
	codes := make([]uint8, len(w))
	deq := make([]float32, len(w))
	for trial := 0; trial < 2000; trial++ {
		for i := range w {
			w[i] = float32(r.NormFloat64() * 0.02 * (1 + 20*float64(r.IntN(50)/49)))
		}
		cases := []gridCase{
			sym4Case(Sym4{Scale: ScaleF16.Round(float32(0.002 + 0.01*r.Float64()))}),
			sym4Case(Sym4{Scale: -ScaleF16.Round(float32(0.002 + 0.01*r.Float64()))}), // the extra step on the positive side
			asym4Case(Asym4{Scale: ScaleBF16.Round(float32(0.002 + 0.01*r.Float64())),
				Zero: ScaleBF16.Round(float32(0.02 * r.NormFloat64()))}),
		}
		for _, g := range cases {
			st := g.quantize(codes, w)
			g.dequantize(deq, codes)
			for i, x := range w {
				if codes[i] > 15 || g.code(x) != codes[i] || deq[i] != g.value(codes[i]) {
					t.Fatalf("%s: value %v: Quantize code %d, Code %d, deq %v", g.name, x, codes[i], g.code(x), deq[i])
				}
				best := math.Inf(1)
				for c := uint8(0); c < 16; c++ {
					best = min(best, math.Abs(float64(x)-float64(g.value(c))))
				}
				if got := math.Abs(float64(x) - float64(deq[i])); got > best*(1+1e-6)+1e-12 {
					t.Fatalf("%s: value %v got code %d (err %g), nearest err %g", g.name, x, codes[i], got, best)
				}
			}
			ref := Compare(w, deq)
			if math.Abs(st.SumErrSq-ref.SumErrSq) > 1e-6*ref.SumErrSq || math.Abs(st.SumSq-ref.SumSq) > 1e-6*ref.SumSq ||
				math.Abs(st.MaxAbs-ref.MaxAbs) > 1e-6*ref.MaxAbs || st.Count != ref.Count {
				t.Fatalf("%s: Quantize stats %+v, Compare %+v", g.name, st, ref)
			}
		}
	}
}

// TestAsym4MatchesTorchaoFormula compares codes with torchao's
// _quantize_affine_tinygemm, round((w - (zero - 8*scale))/scale) clamped,
// evaluated in float64: they may differ only at ties, where both codes are
// equally near (bf16 inputs and parameters make exact ties common; the
// float32 product w*(1/scale) resolves them either way).
func TestAsym4MatchesTorchaoFormula(t *testing.T) {
	w := gaussian(128*512, 0.02, 12)
	mismatches := 0
	for g := 0; g < len(w); g += 128 {
		grp := w[g : g+128]
		p := Asym4MinMax(grp, ScaleBF16)
		for _, x := range grp {
			minVal := float64(p.Zero) - 8*float64(p.Scale)
			f := (float64(x) - minVal) / float64(p.Scale)
			want := uint8(min(max(math.RoundToEven(f), 0), 15))
			if got := p.Code(x); got != want {
				if frac := math.Abs(f - math.Floor(f) - 0.5); frac > 1e-4 {
					t.Fatalf("w=%v params %+v: code %d, torchao formula %d (quotient %v)", x, p, got, want, f)
				}
				mismatches++
			}
		}
	}
	t.Logf("%d of 65536 codes differ from the float64 formula, all at ties", mismatches)
}

func TestCompareAndSNR(t *testing.T) {
	ref := []float32{3, 4}
	if got := SNRdB(ref, ref); !math.IsInf(got, 1) {
		t.Errorf("SNR of exact copy = %v, want +Inf", got)
	}
	approx := []float32{3, 3}
	// Σref² = 25, Σerr² = 1 -> 10*log10(25) = 13.979 dB.
	if got := SNRdB(ref, approx); math.Abs(got-13.979400086720377) > 1e-12 {
		t.Errorf("SNR = %v, want 13.9794", got)
	}
	if got := MaxAbsErr(ref, []float32{2.5, 4.25}); got != 0.5 {
		t.Errorf("MaxAbsErr = %v, want 0.5", got)
	}
}
