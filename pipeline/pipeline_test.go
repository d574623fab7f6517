package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sparkconv/convert"
	"sparkconv/eval"
	"sparkconv/fixtures/fixturestest"
	"sparkconv/onnxgraph"
	"sparkconv/rotate"
	"sparkconv/spark"
)

// TestConvert: a named kept set reaches the format (config.json records
// it), a gate with a bar no build meets gives a verdict and records it in
// the written report, and a format that keeps nothing refuses a kept set.
func TestConvert(t *testing.T) {
	model := fixturestest.Tiny(t, false)
	cfg, err := spark.LoadConfig(model)
	if err != nil {
		t.Fatal(err)
	}
	named, err := convert.KeepModules(cfg, []string{"model.layers.0.mlp.down_proj"})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "w8a8")
	opt := convert.Options{Model: model, Out: out, Quiet: true}
	gate := eval.Gate{On: true, MaxKLD: 1e-12}
	res, err := Convert(context.Background(), opt, convert.W8A8{}, nil, Keep{Named: named}, gate)
	if err != nil {
		t.Fatal(err)
	}
	if res.Kept != named || res.Eval == nil || res.Verdict == nil || !strings.Contains(res.Verdict.Error(), "--max-kld") {
		t.Fatalf("result: kept %v, eval %v, verdict %v", res.Kept, res.Eval, res.Verdict)
	}
	var config map[string]any
	readJSON(t, filepath.Join(out, "config.json"), &config)
	kf, _ := config[convert.KeepFloatKey].(map[string]any)
	if mods, _ := kf["modules"].([]any); len(mods) != 1 || mods[0] != "model.layers.0.mlp.down_proj" {
		t.Errorf("config.json %s: %v", convert.KeepFloatKey, config[convert.KeepFloatKey])
	}
	var report struct {
		Eval struct {
			KLD struct{ Mean float64 } `json:"kld"`
		} `json:"eval"`
		Gate eval.Verdict `json:"gate"`
	}
	readJSON(t, filepath.Join(out, convert.ReportFile), &report)
	if report.Gate.Passed || report.Gate.MaxKLD == nil || report.Eval.KLD.Mean != res.Eval.KLD.Mean || !(report.Eval.KLD.Mean > 0) {
		t.Errorf("report: eval %+v, gate %+v", report.Eval, report.Gate)
	}
	_, err = Convert(context.Background(), convert.Options{Model: model, Out: filepath.Join(t.TempDir(), "w4a16"), Quiet: true},
		convert.W4A16{Group: 32, Pack: "portable"}, nil, Keep{Named: named}, eval.Gate{})
	if err == nil || !strings.Contains(err.Error(), "keeps no linear in float") {
		t.Errorf("w4a16 with a kept set: %v", err)
	}
}

// TestRotate: the gate scores the rotated checkpoint against its input (an
// equivalent model up to the bf16 rounding of its weights: a mean KL
// divergence under 1e-4; 2.5e-6 measured) and records it in the written
// report; without a bar there is no verdict.
func TestRotate(t *testing.T) {
	model := fixturestest.Tiny(t, false)
	out := filepath.Join(t.TempDir(), "rot")
	o := rotate.Options{Options: convert.Options{Model: model, Out: out, Quiet: true}}
	res, err := Rotate(context.Background(), o, eval.Gate{On: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Eval == nil || res.Verdict != nil {
		t.Fatalf("rotate's gate: eval %v, verdict %v", res.Eval != nil, res.Verdict)
	}
	if e := res.Eval; !(e.KLD.Mean < 1e-4) || e.TokensScored == 0 || e.Greedy.Prompts == 0 {
		t.Fatalf("rotate's gate: mean KLD %g over %d tokens, %d greedy prompts", e.KLD.Mean, e.TokensScored, e.Greedy.Prompts)
	}
	var report struct {
		Eval *struct {
			KLD struct{ Mean float64 } `json:"kld"`
		} `json:"eval"`
		Gate *eval.Verdict `json:"gate"`
	}
	readJSON(t, filepath.Join(out, convert.ReportFile), &report)
	if report.Eval == nil || report.Eval.KLD.Mean != res.Eval.KLD.Mean || report.Gate != nil {
		t.Errorf("report: eval %+v, gate %+v", report.Eval, report.Gate)
	}
}

// TestExportONNX: the files listed are the files written, with their
// sizes, and the lint's counts are given.
func TestExportONNX(t *testing.T) {
	model := fixturestest.Tiny(t, false)
	out := filepath.Join(t.TempDir(), "onnx")
	ex, err := ExportONNX(context.Background(), model, out, false, onnxgraph.ExportOptions{}, true)
	if errors.Is(err, ErrLint) {
		t.Fatalf("the tiny export fails the lint: %v", ex.Lint)
	}
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, f := range ex.Files {
		st, err := os.Stat(filepath.Join(out, f.File))
		if err != nil {
			t.Fatal(err)
		}
		sum += st.Size()
	}
	if len(ex.Files) != len(ex.Manifest.AllGraphs()) || sum > ex.Bytes || ex.LintErrors != 0 {
		t.Errorf("%d files of %d graphs, %d bytes of graphs against %d in all, %d lint errors", len(ex.Files), len(ex.Manifest.AllGraphs()), sum, ex.Bytes, ex.LintErrors)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
