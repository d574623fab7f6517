package verify

import (
	"encoding/json"
	"testing"

	"sparkconv/forward"
	"sparkconv/onnxgraph"
	"sparkconv/onnxgraph/exporttest"
	"sparkconv/ortrun/orttest"
)

func verifyExport(t *testing.T, model string, o onnxgraph.ExportOptions, vo Options) *Report {
	t.Helper()
	dir := exporttest.Export(t, model, o)
	ref, err := forward.Open(model, forward.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	vo.Threads = 1
	rep, err := Run(ref, dir, vo)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestVerify(t *testing.T) {
	orttest.Init(t)
	cases := []struct {
		name  string
		model string
		o     onnxgraph.ExportOptions
	}{
		{"fp32-auto", "spark-mini-tied", onnxgraph.ExportOptions{Context: 40}},
		{"fp32-ring", "spark-mini-tied", onnxgraph.ExportOptions{Context: 40, Layout: onnxgraph.LayoutRing}},
		{"fp32-roll-block", "spark-mini-tied", onnxgraph.ExportOptions{Context: 40, Layout: onnxgraph.LayoutRoll, Granularity: "block"}},
		{"fp32-untied", "spark-mini-untied", onnxgraph.ExportOptions{Context: 40}},
		{"fp16-auto", "spark-mini-tied", onnxgraph.ExportOptions{Context: 40, DType: onnxgraph.Float16}},
		{"fp16-roll", "spark-mini-tied", onnxgraph.ExportOptions{Context: 40, DType: onnxgraph.Float16, Layout: onnxgraph.LayoutRoll}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := verifyExport(t, exporttest.Golden(c.model), c.o, Options{Steps: 24, Seed: 3})
			js, _ := json.Marshal(rep)
			if !rep.Pass {
				t.Errorf("verify failed: %v\n%s", rep.Failures, js)
			}
			for _, g := range rep.Graphs {
				t.Logf("%-12s %-6s %7.1f dB  max|err| %.3g", g.File, g.Kind, float64(g.SNR), g.MaxAbs)
			}
			t.Logf("top1 %d top5 %d of %d; chain logits %.1f dB", rep.Top1Agree, rep.Top5Agree, rep.Steps, float64(rep.Chain.SNR))
			if rep.Steps != 24 {
				t.Errorf("steps %d", rep.Steps)
			}
		})
	}
}
