package dtype

import (
	"math"
	"testing"
)

func TestF32ToBF16(t *testing.T) {
	tests := []struct {
		in   uint32
		want uint16
	}{
		{0x3f800000, 0x3f80},                   // 1.0 exact
		{0x3f808000, 0x3f80},                   // tie, even stays
		{0x3f818000, 0x3f82},                   // tie, odd rounds up
		{0x3f808001, 0x3f81},                   // above half rounds up
		{0x7f7fffff, 0x7f80},                   // max float rounds to +Inf
		{0x7f800000, 0x7f80},                   // +Inf
		{0xff800000, 0xff80},                   // -Inf
		{0x7f800001, 0x7fc0},                   // signalling NaN quieted
		{0x80000000, 0x8000},                   // -0
		{math.Float32bits(-2.5), 0xc020},       // exact
		{math.Float32bits(0.1), 0x3dcd},        // 0x3dcccccd rounds up
		{math.Float32bits(1.00390625), 0x3f80}, // 1+2^-8: tie to even
	}
	for _, tc := range tests {
		if got := F32ToBF16(math.Float32frombits(tc.in)); got != tc.want {
			t.Errorf("F32ToBF16(%#08x) = %#04x, want %#04x", tc.in, got, tc.want)
		}
	}
}

func TestBF16RoundTripAll(t *testing.T) {
	for b := 0; b < 1<<16; b++ {
		f := BF16ToF32(uint16(b))
		if f != f {
			continue
		}
		if got := F32ToBF16(f); got != uint16(b) {
			t.Fatalf("bf16 %#04x -> %v -> %#04x", b, f, got)
		}
	}
}

func TestFloatCodecs(t *testing.T) {
	src := []float32{0, 1, -1.5, 65504, 1e-3, 3.140625}
	for _, d := range []DType{BF16, F16, F32} {
		raw, err := FromFloat32(src, d)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, len(src))
		if err := ToFloat32(got, raw, d); err != nil {
			t.Fatal(err)
		}
		for i := range src {
			if want := Round(src[i], d); got[i] != want {
				t.Errorf("%s: value %d = %v, want %v", d, i, got[i], want)
			}
		}
	}
	if _, err := FromFloat32(src, I8); err == nil {
		t.Error("FromFloat32 accepted I8")
	}
	if _, err := Parse("F8_E4M3"); err == nil {
		t.Error("Parse accepted an unknown dtype")
	}
}
