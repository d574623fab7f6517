package quant

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// quantizers runs each whole-matrix entry point and returns comparable
// results: codes widened to int, scales, zeros and stats.
type matrixOut struct {
	codes         []int
	scales, zeros []float32
	stats         ErrStats
}

var matrixSchemes = []struct {
	name string
	run  func(m Matrix) (matrixOut, error)
	// dequant returns the dequantized matrix of an output.
	dequant func(o matrixOut, n, k int) []float32
}{
	{"int8", func(m Matrix) (matrixOut, error) {
		var r Int8Result
		err := QuantizeInt8(&r, m, ScaleBF16)
		return matrixOut{widen(r.Codes), r.Scales, nil, r.Stats}, err
	}, func(o matrixOut, n, k int) []float32 {
		out := make([]float32, n*k)
		for i, c := range o.codes {
			out[i] = Int8{Scale: o.scales[i/k]}.Value(int8(c))
		}
		return out
	}},
	{"sym4 g128 search", func(m Matrix) (matrixOut, error) {
		var r Int4Result
		err := QuantizeSym4(&r, m, 128, ScaleF16, true)
		return matrixOut{widen(r.Codes), r.Scales, nil, r.Stats}, err
	}, func(o matrixOut, n, k int) []float32 {
		out := make([]float32, n*k)
		for i, c := range o.codes {
			out[i] = Sym4{Scale: o.scales[i/128]}.Value(uint8(c))
		}
		return out
	}},
	{"asym4 g32 search", func(m Matrix) (matrixOut, error) {
		var r Int4Result
		err := QuantizeAsym4(&r, m, 32, ScaleBF16, true)
		return matrixOut{widen(r.Codes), r.Scales, r.Zeros, r.Stats}, err
	}, func(o matrixOut, n, k int) []float32 {
		out := make([]float32, n*k)
		for i, c := range o.codes {
			out[i] = Asym4{Scale: o.scales[i/32], Zero: o.zeros[i/32]}.Value(uint8(c))
		}
		return out
	}},
}

func widen[T int8 | uint8](c []T) []int {
	out := make([]int, len(c))
	for i, v := range c {
		out[i] = int(v)
	}
	return out
}

// TestMatrixConsistency: bf16 and float32 input give identical results; the
// results do not depend on GOMAXPROCS (bit for bit, statistics included);
// the statistics match an independent float64 comparison of the
// dequantized matrix.
func TestMatrixConsistency(t *testing.T) {
	const n, k = 300, 512 // 128 rows per chunk: 3 chunks, the last short
	bits, f := realistic(n, k, 41)
	for _, sc := range matrixSchemes {
		t.Run(sc.name, func(t *testing.T) {
			prev := runtime.GOMAXPROCS(1)
			one, err := sc.run(BF16Matrix(n, k, bits))
			runtime.GOMAXPROCS(prev)
			if err != nil {
				t.Fatal(err)
			}
			prev = runtime.GOMAXPROCS(4)
			four, err4 := sc.run(F32Matrix(n, k, f))
			runtime.GOMAXPROCS(prev)
			if err4 != nil {
				t.Fatal(err4)
			}
			if !slices.Equal(one.codes, four.codes) || !slices.Equal(one.scales, four.scales) ||
				!slices.Equal(one.zeros, four.zeros) || one.stats != four.stats {
				t.Fatalf("bf16 input on 1 goroutine and f32 input on 4 differ (stats %+v vs %+v)", one.stats, four.stats)
			}
			ref := Compare(f, sc.dequant(one, n, k))
			st := one.stats
			if st.Count != int64(n*k) || math.Abs(st.SumErrSq/ref.SumErrSq-1) > 1e-6 ||
				math.Abs(st.SumSq/ref.SumSq-1) > 1e-6 || math.Abs(st.MaxAbs/ref.MaxAbs-1) > 1e-6 {
				t.Errorf("stats %+v, independent %+v", st, ref)
			}
		})
	}
}

// TestMatrixManyChunks covers the goroutine split over many chunks.
func TestMatrixManyChunks(t *testing.T) {
	const n, k = 300, 1024 // 64 rows per chunk -> 5 chunks, the last short
	bits, _ := realistic(n, k, 43)
	var a, b Int4Result
	prev := runtime.GOMAXPROCS(1)
	errA := QuantizeSym4(&a, BF16Matrix(n, k, bits), 64, ScaleF16, false)
	runtime.GOMAXPROCS(3)
	errB := QuantizeSym4(&b, BF16Matrix(n, k, bits), 64, ScaleF16, false)
	runtime.GOMAXPROCS(prev)
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if !slices.Equal(a.Codes, b.Codes) || !slices.Equal(a.Scales, b.Scales) || a.Stats != b.Stats {
		t.Fatal("results differ between 1 and 3 goroutines")
	}
	for i := 0; i < n; i += 37 {
		row := make([]float32, k)
		for j := range row {
			row[j] = bf16ToF32(bits[i*k+j])
		}
		for g := 0; g < k/64; g++ {
			if want := Sym4Absmax(row[g*64:(g+1)*64], ScaleF16); a.Sym4(i, g) != want {
				t.Fatalf("row %d group %d: %+v, want %+v", i, g, a.Sym4(i, g), want)
			}
		}
	}
}

func TestMatrixErrors(t *testing.T) {
	good := make([]float32, 4*64)
	nan := slices.Clone(good)
	nan[3*64+5] = float32(math.NaN())
	inf := make([]uint16, 4*64)
	inf[64+2] = 0xFF80 // -Inf
	tests := []struct {
		name string
		run  func() error
		want string
	}{
		{"nan", func() error { var r Int8Result; return QuantizeInt8(&r, F32Matrix(4, 64, nan), ScaleBF16) }, "weight [3, 5]"},
		{"inf bf16", func() error { var r Int4Result; return QuantizeSym4(&r, BF16Matrix(4, 64, inf), 32, ScaleF16, true) }, "weight [1, 2]"},
		{"inf asym", func() error { var r Int4Result; return QuantizeAsym4(&r, BF16Matrix(4, 64, inf), 32, ScaleBF16, false) }, "weight [1, 2]"},
		{"group", func() error { var r Int4Result; return QuantizeSym4(&r, F32Matrix(4, 64, good), 48, ScaleF16, false) }, "group size 48"},
		{"length", func() error { var r Int8Result; return QuantizeInt8(&r, F32Matrix(4, 65, good), ScaleBF16) }, "needs 260 values"},
		{"both", func() error {
			var r Int8Result
			return QuantizeInt8(&r, Matrix{N: 4, K: 64, F32: good, BF16: inf}, ScaleBF16)
		}, "exactly one"},
		{"empty", func() error { var r Int8Result; return QuantizeInt8(&r, F32Matrix(0, 64, nil), ScaleBF16) }, "empty"},
		{"dtype", func() error { var r Int8Result; return QuantizeInt8(&r, F32Matrix(4, 64, good), ScaleDType(9)) }, "scale dtype"},
	}
	for _, tc := range tests {
		err := tc.run()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// TestResultReuse: a result struct is reused across calls of different
// shapes without stale data.
func TestResultReuse(t *testing.T) {
	var r Int4Result
	_, big := realistic(64, 256, 51)
	_, small := realistic(16, 128, 52)
	if err := QuantizeAsym4(&r, F32Matrix(64, 256, big), 32, ScaleBF16, false); err != nil {
		t.Fatal(err)
	}
	if err := QuantizeAsym4(&r, F32Matrix(16, 128, small), 64, ScaleBF16, false); err != nil {
		t.Fatal(err)
	}
	if len(r.Codes) != 16*128 || len(r.Scales) != 16*2 || len(r.Zeros) != 16*2 || r.Group != 64 || r.Stats.Count != 16*128 {
		t.Fatalf("reused result has codes %d scales %d zeros %d group %d count %d",
			len(r.Codes), len(r.Scales), len(r.Zeros), r.Group, r.Stats.Count)
	}
	if err := QuantizeSym4(&r, F32Matrix(16, 128, small), 64, ScaleF16, false); err != nil {
		t.Fatal(err)
	}
	if r.Zeros != nil {
		t.Error("Sym4 result keeps zeros")
	}
}

// TestResultDequantize: the results' Dequantize reproduces the statistics
// the quantizers reported.
func TestResultDequantize(t *testing.T) {
	const n, k = 64, 256
	_, f := realistic(n, k, 61)
	deq := make([]float32, n*k)
	var r8 Int8Result
	if err := QuantizeInt8(&r8, F32Matrix(n, k, f), ScaleBF16); err != nil {
		t.Fatal(err)
	}
	r8.Dequantize(deq)
	if got := Compare(f, deq).SNRdB(); math.Abs(got-r8.Stats.SNRdB()) > 1e-5 {
		t.Errorf("int8: dequantized SNR %.6f, reported %.6f", got, r8.Stats.SNRdB())
	}
	var r4 Int4Result
	for _, asym := range []bool{false, true} {
		var err error
		if asym {
			err = QuantizeAsym4(&r4, F32Matrix(n, k, f), 64, ScaleBF16, true)
		} else {
			err = QuantizeSym4(&r4, F32Matrix(n, k, f), 64, ScaleF16, true)
		}
		if err != nil {
			t.Fatal(err)
		}
		r4.Dequantize(deq)
		if got := Compare(f, deq).SNRdB(); math.Abs(got-r4.Stats.SNRdB()) > 1e-5 {
			t.Errorf("asym=%v: dequantized SNR %.6f, reported %.6f", asym, got, r4.Stats.SNRdB())
		}
	}
}

func TestInt8ScalesMatchQuantize(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	w := make([]float32, 37*64)
	for i := range w {
		w[i] = float32(r.NormFloat64() * 0.02)
	}
	w[3*64+5] = 0.9 // an outlier row
	m := F32Matrix(37, 64, w)
	var full Int8Result
	if err := QuantizeInt8(&full, m, ScaleBF16); err != nil {
		t.Fatal(err)
	}
	scales, err := Int8Scales(m, ScaleBF16)
	if err != nil {
		t.Fatal(err)
	}
	for n := range scales {
		if scales[n] != full.Scales[n] {
			t.Fatalf("row %d: Int8Scales %v, QuantizeInt8 %v", n, scales[n], full.Scales[n])
		}
	}
}

func TestInt8ScalesBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	bits := make([]uint16, 33*48)
	for i := range bits {
		bits[i] = f32ToBF16(float32(r.NormFloat64() * 0.02))
	}
	m := BF16Matrix(33, 48, bits)
	var full Int8Result
	if err := QuantizeInt8(&full, m, ScaleBF16); err != nil {
		t.Fatal(err)
	}
	scales, err := Int8Scales(m, ScaleBF16)
	if err != nil || !slices.Equal(scales, full.Scales) {
		t.Fatalf("bf16 Int8Scales %v (%v), QuantizeInt8 %v", scales[:3], err, full.Scales[:3])
	}
	bits[5*48+7] = 0xffc0 // NaN
	if _, err := Int8Scales(m, ScaleBF16); err == nil || !strings.Contains(err.Error(), "[5, 7] is NaN") {
		t.Errorf("NaN row: %v", err)
	}
}
