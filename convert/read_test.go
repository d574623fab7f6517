package convert

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"sparkconv/dtype"
	"sparkconv/fixtures/fixturestest"
	"sparkconv/forward"
	"sparkconv/safetensors"
	"sparkconv/spark"
)

// openQuant opens an output with OpenWeights and fails the test otherwise.
func openQuant(t *testing.T, dir string) forward.Weights {
	t.Helper()
	w, err := OpenWeights(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// dequant returns the reader's values of one tensor and its input rule.
func dequant(t *testing.T, w forward.Weights, name string, n, k int) ([]float32, forward.Act) {
	t.Helper()
	if _, _, ok, err := w.Float(name); ok || err != nil {
		t.Fatalf("%s: Float says ok=%v err=%v for a quantized tensor", name, ok, err)
	}
	dst := make([]float32, n*k)
	act, err := w.Dequantize(name, dst)
	if err != nil {
		t.Fatal(err)
	}
	return dst, act
}

// TestReadW8A8 checks the W8A8 reader against the test's own decoding of
// the file (code * scale, from docs/formats.md#w8a8), value for value.
func TestReadW8A8(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	out := filepath.Join(t.TempDir(), "w8a8")
	if _, err := Convert(context.Background(), Options{Model: in, Out: out, Quiet: true}, W8A8{}, nil); err != nil {
		t.Fatal(err)
	}
	w := openQuant(t, out)
	ck, err := safetensors.OpenDir(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for _, s := range w.Config().Tensors() {
		if s.Kind != spark.KindLinear {
			if _, _, ok, err := w.Float(s.Name); !ok || err != nil {
				t.Errorf("%s: not read as a float tensor (%v)", s.Name, err)
			}
			continue
		}
		n, k := int(s.Shape[0]), int(s.Shape[1])
		got, act := dequant(t, w, s.Name, n, k)
		if act != (forward.Act{DType: dtype.BF16, Int8: forward.Int8Dynamic}) {
			t.Errorf("%s: activation rule %v", s.Name, act)
		}
		_, q, _ := ck.Raw(s.Module() + ".weight")
		_, sc, _ := ck.Raw(s.Module() + ".weight_scale")
		scales := decBF16(sc)
		for i, v := range got {
			want := float32(float64(int8(q[i])) * scales[i/k])
			if v != want {
				t.Fatalf("%s[%d]: reader %g, file says %g", s.Name, i, v, want)
			}
		}
	}
	if !strings.Contains(w.Describe(), "W8A8") {
		t.Errorf("Describe = %q", w.Describe())
	}
}

// TestReadW4A16 checks the cpu_int4 reader against the test decoder
// (readW4) for the portable pack and a quantized head, and the avx512 and
// avx2 packs against the portable one (same codes, other layouts).
func TestReadW4A16(t *testing.T) {
	outs := buildPacks(t, fixturestest.Tiny(t, false), 32)
	ref := openQuant(t, outs["portable"])
	ck, err := safetensors.OpenDir(outs["portable"])
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	heads := 0
	for _, tg := range Targets(ref.Config(), true) {
		got, act := dequant(t, ref, tg.Source, tg.N, tg.K)
		if act != (forward.Act{DType: dtype.BF16}) {
			t.Errorf("%s: activation rule %v", tg.Source, act)
		}
		l := readW4(t, ck, tg.Module, tg.N, tg.K, 32)
		for i, v := range got {
			if want := float32(l.value(i/tg.K, i%tg.K)); v != want {
				t.Fatalf("%s[%d]: reader %g, test decoder %g", tg.Source, i, v, want)
			}
		}
		for _, pack := range []string{"avx512", "avx2"} {
			other, _ := dequant(t, openQuant(t, outs[pack]), tg.Source, tg.N, tg.K)
			for i := range got {
				if other[i] != got[i] {
					t.Fatalf("%s pack %s [%d]: %g, portable %g", tg.Source, pack, i, other[i], got[i])
				}
			}
		}
		if tg.Module == "lm_head" {
			heads++
		}
	}
	if heads != 1 {
		t.Errorf("%d quantized heads read", heads)
	}
}

// TestReadForward runs the forward on a W4A16 output: the logits follow
// the original's (top-1 agrees at most positions, and the outputs differ
// because the weights do).
func TestReadForward(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	out := filepath.Join(t.TempDir(), "w4")
	runConvert(t, Options{Model: in, Out: out}, W4A16{Group: 32})
	base, err := OpenWeights(in)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := base.(forward.CheckpointWeights); !ok {
		t.Fatalf("original opened as %T", base)
	}
	logits := func(w forward.Weights) []float32 {
		m, err := forward.NewWeights(w, forward.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		ids := make([]int, 48)
		for i := range ids {
			ids[i] = (i*37 + 5) % m.Cfg.VocabSize
		}
		r, err := m.Prefill(ids, forward.PrefillOptions{Logits: forward.AllLogits})
		if err != nil {
			t.Fatal(err)
		}
		return r.Logits
	}
	a := logits(base)
	b := logits(openQuant(t, out))
	V := len(a) / 48
	same := 0
	var sig, noise float64
	for p := range 48 {
		same += b2i(argmax(a[p*V:(p+1)*V]) == argmax(b[p*V:(p+1)*V]))
		for v := range V {
			d := float64(a[p*V+v] - b[p*V+v])
			sig += float64(a[p*V+v]) * float64(a[p*V+v])
			noise += d * d
		}
	}
	snr := 10 * math.Log10(sig/noise)
	t.Logf("W4A16 g32 tiny: logits SNR %.1f dB, same top-1 %d/48", snr, same)
	if noise == 0 || snr < 5 || same < 24 {
		t.Errorf("logits SNR %.1f dB, same top-1 %d/48", snr, same)
	}
}

// TestRefuseQuantizedInput: a converter given its own output says what it
// is and what to give instead.
func TestRefuseQuantizedInput(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	out := filepath.Join(t.TempDir(), "w8a8")
	if _, err := Convert(context.Background(), Options{Model: in, Out: out, Quiet: true}, W8A8{}, nil); err != nil {
		t.Fatal(err)
	}
	_, err := Convert(context.Background(), Options{Model: out, Out: filepath.Join(t.TempDir(), "again"), Quiet: true}, W8A8{}, nil)
	if err == nil || !strings.Contains(err.Error(), "a compressed-tensors checkpoint (int8 W8A8") || !strings.Contains(err.Error(), "give the original") || strings.Contains(err.Error(), "\n") {
		t.Errorf("err = %v", err)
	}
}

func argmax(row []float32) int {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return best
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestReadCPUInt4 checks the readers of vLLM's CPU int4 checkpoints (GPTQ,
// w4a8-zp) against their test decoders (readGPTQ, readZP) on --quant-head
// checkpoints, and the W4A8 activation rule of a bf16 model.
func TestReadCPUInt4(t *testing.T) {
	type decoded interface{ value(n, k int) float64 }
	for _, c := range []struct {
		name   string
		f      Format
		decode func(t *testing.T, ck *safetensors.Checkpoint, tg Target) decoded
	}{
		{"gptq", W4A8{Group: 32, QuantHead: true}, func(t *testing.T, ck *safetensors.Checkpoint, tg Target) decoded {
			return readGPTQ(t, ck, tg.Module, tg.N, tg.K, 32)
		}},
		{"w4a8-zp", W4A8ZP{Group: 32, QuantHead: true}, func(t *testing.T, ck *safetensors.Checkpoint, tg Target) decoded {
			return readZP(t, ck, tg.Module, tg.N, tg.K, 32)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := fixturestest.Tiny(t, false)
			out := filepath.Join(t.TempDir(), c.name)
			runConvert(t, Options{Model: in, Out: out}, c.f)
			w := openQuant(t, out)
			ck, err := safetensors.OpenDir(out)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			targets := Targets(w.Config(), true)
			if targets[len(targets)-1].Module != "lm_head" {
				t.Fatalf("last target %v, want the head", targets[len(targets)-1])
			}
			for _, tg := range targets {
				got, act := dequant(t, w, tg.Source, tg.N, tg.K)
				if act != (forward.Act{DType: dtype.BF16, Int8: forward.Int8VLLMRow}) {
					t.Errorf("%s: activation rule %v", tg.Source, act)
				}
				l := c.decode(t, ck, tg)
				for i, v := range got {
					if want := float32(l.value(i/tg.K, i%tg.K)); v != want {
						t.Fatalf("%s[%d]: reader %g, test decoder %g", tg.Source, i, v, want)
					}
				}
			}
		})
	}
}
