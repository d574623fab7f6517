package qnn

import (
	"math"
	"strings"
	"testing"
)

// TestEncodingFormulas checks the grids against docs/qnn.md#encoding-grids's formulas and
// the examples of 2.6 (computed there independently).
func TestEncodingFormulas(t *testing.T) {
	a := AsymmetricEncoding("/layer0/attn/out", 16, -2, 6)
	if a.Scale[0] != float32(0.00012207217517357137) || a.Offset[0] != -16384 || a.IsSym || a.DType != "INT" || a.EncType != PerTensor {
		t.Fatalf("asymmetric 16-bit [-2, 6]: %+v", a)
	}
	if lo, hi := a.MinMax(0); math.Abs(lo+2.0000305) > 1e-6 || math.Abs(hi-5.9999695) > 1e-6 {
		t.Errorf("asymmetric min/max %v %v, want -2.0000305 5.9999695", lo, hi)
	}
	w := SymmetricEncoding("layer0.q_proj.weight", 8, []float64{0.5})
	if w.Scale[0] != float32(0.003937007874015748) || w.Offset[0] != -128 || !w.IsSym || w.EncType != PerTensor {
		t.Fatalf("symmetric 8-bit 0.5: %+v", w)
	}
	if lo, hi := w.MinMax(0); math.Abs(lo+0.50393701) > 1e-7 || math.Abs(hi-0.5) > 1e-7 {
		t.Errorf("symmetric min/max %v %v, want -0.50393701 0.5", lo, hi)
	}
	pc := SymmetricEncoding("w", 4, []float64{0.5, 0.35})
	if pc.EncType != PerChannel || math.Abs(float64(pc.Scale[0])-0.0714285714) > 1e-8 || math.Abs(float64(pc.Scale[1])-0.05) > 1e-8 || pc.Offset[1] != -8 {
		t.Errorf("per-channel 4-bit: %+v", pc)
	}
	// The range is widened to hold 0, and 0 is exactly on the grid.
	pos := AsymmetricEncoding("p", 8, 0.5, 2)
	if lo, _ := pos.MinMax(0); lo != 0 || pos.Offset[0] != 0 {
		t.Errorf("positive range not widened to 0: %+v", pos)
	}
	neg := AsymmetricEncoding("n", 16, -50, 0)
	lo, hi := neg.MinMax(0)
	if hi != 0 || math.Abs(lo+50) > 1e-3 {
		t.Errorf("mask grid [%v, %v]", lo, hi)
	}
	for _, e := range []Encoding{a, w, pc, pos, neg} {
		if p := e.Problems(e.IsSym); len(p) != 0 && e.BW != 4 {
			t.Errorf("%s: %v", e.Name, p)
		}
	}
}

func TestEncodingProblems(t *testing.T) {
	good := AsymmetricEncoding("x", 16, -1, 1)
	cases := []struct {
		name  string
		edit  func(*Encoding)
		param bool
		want  string
	}{
		{"dtype", func(e *Encoding) { e.DType = "FLOAT" }, false, "treats anything but"},
		{"bw", func(e *Encoding) { e.BW = 12 }, false, "bit width 12"},
		{"4-bit activation", func(e *Encoding) { e.BW = 4 }, false, "bit width 4"},
		{"per-channel activation", func(e *Encoding) { e.EncType = PerChannel }, false, "PER_CHANNEL on an activation"},
		{"scale", func(e *Encoding) { e.Scale = []float32{0} }, false, "positive finite"},
		{"lengths", func(e *Encoding) { e.Offset = nil }, false, "1 scales and 0 offsets"},
		{"sym offset", func(e *Encoding) { e.IsSym, e.Offset = true, []int32{0} }, true, "symmetric offset"},
		{"per-channel asym", func(e *Encoding) { e.EncType = PerChannel }, true, "must be symmetric"},
	}
	for _, c := range cases {
		e := good
		e.Scale, e.Offset = append([]float32(nil), good.Scale...), append([]int32(nil), good.Offset...)
		c.edit(&e)
		if p := strings.Join(e.Problems(c.param), "; "); !strings.Contains(p, c.want) {
			t.Errorf("%s: problems %q, want %q", c.name, p, c.want)
		}
	}
}

func TestEncodingsRoundTrip(t *testing.T) {
	f := &Encodings{Version: EncodingsVersion, ExcludedLayers: []string{},
		Activations: []Encoding{AsymmetricEncoding("a", 16, -0.12, 7.4)},
		Params:      []Encoding{SymmetricEncoding("w", 8, []float64{0.1, 0.2, 0.3})}}
	data, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseEncodings(data)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Activations[0].Same(f.Activations[0]) || !back.Params[0].Same(f.Params[0]) || back.Params[0].Name != "w" {
		t.Fatalf("round trip changed the entries:\n%s", data)
	}
	if !strings.Contains(string(data), `"dtype": "INT"`) || !strings.Contains(string(data), `"enc_type": "PER_CHANNEL"`) {
		t.Errorf("file lacks the converter's keys:\n%s", data)
	}
	for _, bad := range []string{`{"version": "0.6.1"}`, `[]`, `{"version": "1.0.0", "activation_encodings": [{"bw": 8}]}`} {
		if _, err := ParseEncodings([]byte(bad)); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
}
