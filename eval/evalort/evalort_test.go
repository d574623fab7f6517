package evalort

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sparkconv/corpus"
	"sparkconv/eval"
	"sparkconv/fixtures/fixturestest"
	"sparkconv/forward"
	"sparkconv/onnxgraph"
	"sparkconv/onnxgraph/exporttest"
	"sparkconv/ortrun/orttest"
	"sparkconv/tokenizer"
)

// tokenByToken hides Export's Batch: eval then runs one Logits call per
// sequence, token by token through a Runner holding every session.
type tokenByToken struct{ *Export }

func (t tokenByToken) Describe() string                           { return t.Export.Describe() }
func (t tokenByToken) Vocab() int                                 { return t.Export.Vocab() }
func (t tokenByToken) Logits(ids []int, f int) ([]float32, error) { return t.Export.Logits(ids, f) }

// TestExportFidelity scores the tiny model's ONNX exports in ONNX Runtime
// against its checkpoint: the fp32 export within 1e-4 mean KLD and the
// same top-1 nearly everywhere; fp16 is reported and bounded loosely. The
// graph-major batches (one session open at a time) score exactly what the
// token-by-token Runner scores, and give each layer's output error.
func TestExportFidelity(t *testing.T) {
	orttest.Init(t)
	dir := fixturestest.Tiny(t, false)
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	text, err := eval.TextFromSamples([]byte(corpus.HeldOut), corpus.HeldOutName, false, tok, 16)
	if err != nil {
		t.Fatal(err)
	}
	text.Stream = text.Stream[:3*64]
	opt := eval.Settings{Ctx: 64, Prompts: 2, GenTokens: 8}
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
		dt                          onnxgraph.DType
		prefill                     int
		maxKLD, minTop, maxLayerErr float64
	}{{onnxgraph.Float32, 0, 1e-4, 0.99, 1e-5}, {onnxgraph.Float16, 0, 1e-2, 0.9, 1e-2}, {onnxgraph.Float32, 12, 1e-4, 0.99, 1e-5}} {
		exp := exporttest.Export(t, dir, onnxgraph.ExportOptions{Context: 64, DType: c.dt, Layout: onnxgraph.LayoutRing, Prefill: c.prefill})
		e, err := Open(exp, 1, "")
		if err != nil {
			t.Fatal(err)
		}
		if e.UsePrefill(true) != (c.prefill > 0) || (c.prefill > 0) != strings.Contains(e.Describe(), "prefill chunks") {
			t.Errorf("prefill %d: %s", c.prefill, e.Describe())
		}
		r, err := eval.Evaluate(base, e, opt)
		if err != nil {
			t.Fatal(err)
		}
		if e.runner != nil {
			t.Errorf("%s: the graph-major evaluation opened every session", c.dt)
		}
		tok, err := eval.Evaluate(base, tokenByToken{e}, opt)
		e.Close()
		if err != nil {
			t.Fatal(err)
		}
		if r.Stats != tok.Stats || !slices.Equal(r.KLDByPosition, tok.KLDByPosition) || !slices.Equal(r.Greedy.Diverged, tok.Greedy.Diverged) {
			t.Errorf("%s: graph-major %+v %v\ntoken by token %+v %v", c.dt, r.Stats, r.Greedy, tok.Stats, tok.Greedy)
		}
		if len(r.LayerRelErr) != 4 || slices.Max(r.LayerRelErr) > c.maxLayerErr || !(slices.Min(r.LayerRelErr) > 0) {
			t.Errorf("%s: layer errors %v", c.dt, r.LayerRelErr)
		}
		t.Logf("%s export: layer output relative errors %.3g", c.dt, r.LayerRelErr)
		t.Logf("%s export, prefill %d: KLD %.3g (max %.3g), same top-1 %.4f, PPL ratio %.6f, greedy %d/%d; %.0f tokens/s",
			c.dt, c.prefill, r.KLD.Mean, r.KLD.Max, r.SameTop1, r.PPLRatio, r.Greedy.Exact, r.Greedy.Prompts, r.TokensPerS)
		if r.KLD.Mean > c.maxKLD || r.SameTop1 < c.minTop || r.TokensScored != 3*31 {
			t.Errorf("%s export: %+v", c.dt, r.Stats)
		}
	}
}
