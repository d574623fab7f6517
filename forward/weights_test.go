package forward

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"sparkconv/dtype"
)

// TestActApply checks the activation rules on rows whose answers are
// worked out by hand: amax 127 gives scale 1, so the codes are the rounded
// values; halves separate vLLM's std::round from half-to-even.
func TestActApply(t *testing.T) {
	x := []float32{127, -2.5, 3.5, 0.5, -0.5, 10.4, 0, 0, 0, 0, 0, 0}
	cases := []struct {
		act  Act
		want []float32
	}{
		{Act{}, x},
		{Act{DType: dtype.BF16}, []float32{127, -2.5, 3.5, 0.5, -0.5, 10.375, 0, 0, 0, 0, 0, 0}},
		{Act{Int8: Int8VLLMRow}, []float32{127, -3, 4, 1, -1, 10, 0, 0, 0, 0, 0, 0}},
		{Act{Int8: Int8Dynamic}, []float32{127, -2, 4, 0, 0, 10, 0, 0, 0, 0, 0, 0}},
		{Act{DType: dtype.BF16, Int8: Int8VLLMRow}, []float32{127, -3, 4, 1, -1, 10, 0, 0, 0, 0, 0, 0}},
	}
	for _, c := range cases {
		got := make([]float32, len(x))
		c.act.Apply(got, x, 6)
		if !slices.Equal(got, c.want) {
			t.Errorf("%v: %v, want %v", c.act, got, c.want)
		}
	}
	// a scale that is not 1: amax 2.54 -> scale 0.02, 1.0 -> code 50
	got := make([]float32, 2)
	Act{Int8: Int8Dynamic}.Apply(got, []float32{2.54, 1.0}, 2)
	if s := float32(2.54) / 127; got[0] != 127*s || got[1] != float32(50)*s {
		t.Errorf("scaled row %v", got)
	}
}

// widenAll makes m multiply float32 copies of every weight: all layers
// through Layer (the float32 fields) and the head widened whole.
func widenAll(t *testing.T, m *Model) {
	t.Helper()
	for i := range m.Cfg.NumLayers {
		l, err := m.Layer(i)
		if err != nil {
			t.Fatal(err)
		}
		for f := range l.bf16 {
			if l.bf16[f] != nil || len(*l.fields()[f]) == 0 {
				t.Fatalf("layer %d field %d not widened by Layer", i, f)
			}
		}
	}
	m.headBits = nil
}

func bitsEqual(t *testing.T, what string, a, b []float32) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d values vs %d", what, len(a), len(b))
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("%s[%d]: bf16 in place %v, float32 copy %v", what, i, a[i], b[i])
		}
	}
}

// TestBF16InPlace checks that multiplying the checkpoint's bf16 weights in
// place gives bit for bit what their float32 copies give: prefill (every
// dumped tensor and the logits) and decode steps, on both goldens.
func TestBF16InPlace(t *testing.T) {
	for _, name := range goldens {
		t.Run(name, func(t *testing.T) {
			run := func(widened bool) (*Result, []float32) {
				g := loadGolden(t, name, Options{})
				if !widened {
					l, err := g.m.layer(0)
					if err != nil {
						t.Fatal(err)
					}
					if l.bf16[actQKV] == nil || len(l.QKV) != 0 || g.m.headBits == nil {
						t.Fatal("bf16 checkpoint: weights not multiplied in place")
					}
				} else {
					widenAll(t, g.m)
				}
				r, err := g.m.Prefill(g.ids, PrefillOptions{Dump: true, Logits: AllLogits})
				if err != nil {
					t.Fatal(err)
				}
				d := g.m.NewDecoder(len(g.ids), nil)
				var steps []float32
				for _, id := range g.ids[:3] {
					s, err := d.Step(id, false)
					if err != nil {
						t.Fatal(err)
					}
					steps = append(steps, s.Logits...)
				}
				return r, steps
			}
			a, sa := run(false)
			b, sb := run(true)
			bitsEqual(t, "logits", a.Logits, b.Logits)
			bitsEqual(t, "hidden_out", a.HiddenOut, b.HiddenOut)
			for i := range a.Key {
				bitsEqual(t, fmt.Sprintf("key.%d", i), a.Key[i], b.Key[i])
				bitsEqual(t, fmt.Sprintf("hidden_in.%d", i), a.HiddenIn[i], b.HiddenIn[i])
			}
			bitsEqual(t, "decode logits", sa, sb)
		})
	}
}

// misaligned serves a checkpoint's tensors from odd addresses.
type misaligned struct{ CheckpointWeights }

func (w misaligned) Float(name string) (dtype.DType, []byte, bool, error) {
	dt, raw, ok, err := w.CheckpointWeights.Float(name)
	buf := make([]byte, len(raw)+1)
	copy(buf[1:], raw)
	return dt, buf[1:], ok, err
}

// TestBF16Fallback checks that bytes which cannot be viewed as bf16 words
// are widened instead, with the same results.
func TestBF16Fallback(t *testing.T) {
	g := loadGolden(t, goldens[0], Options{})
	sm := g.m.W.(CheckpointWeights)
	m, err := NewWeights(misaligned{sm}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.layer(0)
	if err != nil {
		t.Fatal(err)
	}
	if l.bf16[actQKV] != nil || len(l.QKV) == 0 || m.headBits != nil {
		t.Fatal("misaligned bf16 bytes were viewed in place")
	}
	a, err := m.Prefill(g.ids, PrefillOptions{Logits: AllLogits})
	if err != nil {
		t.Fatal(err)
	}
	b, err := g.m.Prefill(g.ids, PrefillOptions{Logits: AllLogits})
	if err != nil {
		t.Fatal(err)
	}
	bitsEqual(t, "logits", a.Logits, b.Logits)
}

// TestFamilyLinearsOneToken checks that a model run with the family's
// linear products (Options.FamilyLinears, GPTQ's calibration forward) on
// the checkpoint's bf16 weights takes a one-token sequence (a sample's last
// chunk may hold a single token): for T = 1 the family's product is
// MatMulNT's, so the logits equal the plain model's bit for bit.
func TestFamilyLinearsOneToken(t *testing.T) {
	for _, name := range goldens {
		t.Run(name, func(t *testing.T) {
			run := func(opt Options) []float32 {
				g := loadGolden(t, name, opt)
				r, err := g.m.Prefill(g.ids[:1], PrefillOptions{Logits: AllLogits})
				if err != nil {
					t.Fatal(err)
				}
				return r.Logits
			}
			bitsEqual(t, "logits", run(Options{FamilyLinears: true}), run(Options{}))
		})
	}
}
