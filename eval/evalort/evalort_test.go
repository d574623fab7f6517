package evalort

import (
	"path/filepath"
	"testing"

	"sparkconv/eval"
	"sparkconv/fixtures/fixturestest"
	"sparkconv/forward"
	"sparkconv/onnxgraph"
	"sparkconv/onnxgraph/exporttest"
	"sparkconv/ortrun/orttest"
	"sparkconv/tokenizer"
)

// TestExportFidelity scores the tiny model's ONNX exports in ONNX Runtime
// against its checkpoint: the fp32 export within 1e-4 mean KLD and the
// same top-1 nearly everywhere; fp16 is reported and bounded loosely.
func TestExportFidelity(t *testing.T) {
	orttest.Init(t)
	dir := fixturestest.Tiny(t, false)
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	text, err := eval.TextFromSamples([]byte(eval.HeldOut), eval.HeldOutName, false, tok, 16)
	if err != nil {
		t.Fatal(err)
	}
	text.Stream = text.Stream[:3*64]
	opt := eval.Options{Ctx: 64, Prompts: 2, GenTokens: 8}
	base, done, err := eval.EnsureBase("", func() (eval.Model, func(), error) {
		m, err := forward.Open(dir, forward.Options{})
		if err != nil {
			return nil, nil, err
		}
		return eval.Forward{M: m}, func() { m.Close() }, nil
	}, text, opt, 512)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	for _, c := range []struct {
		dt             onnxgraph.DType
		maxKLD, minTop float64
	}{{onnxgraph.Float32, 1e-4, 0.99}, {onnxgraph.Float16, 1e-2, 0.9}} {
		exp := exporttest.Export(t, dir, onnxgraph.ExportOptions{Context: 64, DType: c.dt, Layout: onnxgraph.LayoutRing})
		e, err := Open(exp, 1, "")
		if err != nil {
			t.Fatal(err)
		}
		r, err := eval.Evaluate(base, e, opt)
		e.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s export: KLD %.3g (max %.3g), same top-1 %.4f, PPL ratio %.6f, greedy %d/%d; %.0f tokens/s",
			c.dt, r.KLD.Mean, r.KLD.Max, r.SameTop1, r.PPLRatio, r.Greedy.Exact, r.Greedy.Prompts, r.TokensPerS)
		if r.KLD.Mean > c.maxKLD || r.SameTop1 < c.minTop || r.TokensScored != 3*31 {
			t.Errorf("%s export: %+v", c.dt, r.Stats)
		}
	}
}
