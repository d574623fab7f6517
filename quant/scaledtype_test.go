package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// bf16Nearest is an independent reference: pick the nearer of the two bf16
// neighbours of finite x by exact float64 distance, ties to the even one.
func bf16Nearest(x float32) uint16 {
	u := math.Float32bits(x)
	lo := uint16(u >> 16) // truncation toward zero: same sign, smaller magnitude
	hi := lo + 1
	dlo := math.Abs(float64(x) - float64(bf16ToF32(lo)))
	dhi := math.Abs(float64(x) - float64(bf16ToF32(hi)))
	switch {
	case dlo < dhi:
		return lo
	case dhi < dlo:
		return hi
	case lo&1 == 0:
		return lo
	}
	return hi
}

func TestF32ToBF16(t *testing.T) {
	tests := []struct {
		name string
		in   float32
		want uint16
	}{
		{"one", 1, 0x3F80},
		{"tie to even down", math.Float32frombits(0x3F808000), 0x3F80},
		{"tie to even up", math.Float32frombits(0x3F818000), 0x3F82},
		{"above tie", math.Float32frombits(0x3F808001), 0x3F81},
		{"negative", -2.5, 0xC020},
		{"max float rounds to inf", math.MaxFloat32, 0x7F80},
		{"inf", float32(math.Inf(-1)), 0xFF80},
		{"nan quieted", math.Float32frombits(0x7F800001), 0x7FC0},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
	}
	for _, tc := range tests {
		if got := f32ToBF16(tc.in); got != tc.want {
			t.Errorf("%s: f32ToBF16(%v) = %#04x, want %#04x", tc.name, tc.in, got, tc.want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		x := math.Float32frombits(r.Uint32())
		if absBits(x) >= 0x7f7f8000 { // NaN, Inf, or rounds past max bf16
			continue
		}
		if got, want := f32ToBF16(x), bf16Nearest(x); got != want {
			t.Fatalf("f32ToBF16(%#08x) = %#04x, want %#04x", math.Float32bits(x), got, want)
		}
	}
}

func TestScaleDTypeRound(t *testing.T) {
	tests := []struct {
		dt   ScaleDType
		in   float32
		want float32
	}{
		{ScaleF32, 0.1, 0.1},
		{ScaleBF16, 0.1, 0.10009765625},
		{ScaleF16, 0.1, 0.0999755859375},
		{ScaleF16, 65504, 65504},
		{ScaleF16, 0x1p-24, 0x1p-24},
		{ScaleF16, 0x1p-26, 0},
		{ScaleF16, 2.0 / 15, 0.13330078125},
	}
	for _, tc := range tests {
		if got := tc.dt.Round(tc.in); got != tc.want {
			t.Errorf("%v.Round(%v) = %v, want %v", tc.dt, tc.in, got, tc.want)
		}
	}
}

func TestPutParamsRoundTrip(t *testing.T) {
	vals := []float32{0.5, -3.25, 0x1p-20, 1234.5}
	for _, dt := range []ScaleDType{ScaleF32, ScaleBF16, ScaleF16} {
		in := make([]float32, len(vals))
		for i, v := range vals {
			in[i] = dt.Round(v)
		}
		buf := make([]byte, len(in)*dt.Size())
		dt.PutParams(buf, in)
		for i := range in {
			if got := dt.Param(buf, i); got != in[i] {
				t.Errorf("%v: value %d round trip %v -> %v", dt, i, in[i], got)
			}
		}
	}
	// Known bytes: bf16 1.0 is 0x3F80, little-endian.
	buf := make([]byte, 2)
	ScaleBF16.PutParams(buf, []float32{1})
	if buf[0] != 0x80 || buf[1] != 0x3F {
		t.Errorf("bf16 1.0 bytes = % x, want 80 3f", buf)
	}
	ScaleF16.PutParams(buf, []float32{1})
	if buf[0] != 0x00 || buf[1] != 0x3C {
		t.Errorf("fp16 1.0 bytes = % x, want 00 3c", buf)
	}
}
