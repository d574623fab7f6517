package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sparkconv/forward"
	"sparkconv/onnxgraph"
	"sparkconv/onnxgraph/exporttest"
	"sparkconv/ortrun/orttest"
	"sparkconv/spark"
	"sparkconv/synthetic"
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
	rep, err := Compare(context.Background(), ref, []string{dir}, vo)
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

func openRef(t *testing.T, model string) *forward.Model {
	t.Helper()
	ref, err := forward.Open(model, forward.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Close() })
	return ref
}

// TestVerifyTrustsNothing: a changed file is named before anything runs;
// an export of another checkpoint of the same shape is refused as such; the
// folders of a --layers matrix verify as a union (and pass), while a gap or
// an overlap is refused by name; a cancelled context stops the run.
func TestVerifyTrustsNothing(t *testing.T) {
	orttest.Init(t)
	tied := exporttest.Golden("spark-mini-tied")
	ref := openRef(t, tied)
	sm, err := spark.Open(tied)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := onnxgraph.SourceFingerprint(sm)
	sm.Close()
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Steps: 12, Seed: 1, Threads: 1, Fingerprint: fp}
	full := exporttest.Export(t, tied, onnxgraph.ExportOptions{Context: 16})
	run := func(dirs ...string) (*Report, error) { return Compare(context.Background(), ref, dirs, o) }
	if rep, err := run(full); err != nil || !rep.Pass {
		t.Fatalf("clean export: %v %+v", err, rep)
	}

	tampered := t.TempDir()
	copyDir(t, full, tampered)
	f, _ := os.OpenFile(filepath.Join(tampered, "layer_03.onnx"), os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte{0})
	f.Close()
	if _, err := run(tampered); err == nil || !strings.Contains(err.Error(), "layer_03.onnx: sha256") || !strings.Contains(err.Error(), "do not match their manifest") {
		t.Errorf("tampered file: %v", err)
	}

	// Two tiny fixtures of one shape and config, different seeds: the
	// export of one verified against the other is refused by name.
	seed1, seed2 := filepath.Join(t.TempDir(), "s1"), filepath.Join(t.TempDir(), "s2")
	for i, d := range []string{seed1, seed2} {
		os.Mkdir(d, 0o755)
		if err := synthetic.Generate(d, synthetic.Options{Preset: "tiny", Seed: uint64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	s2, err := spark.Open(seed2)
	if err != nil {
		t.Fatal(err)
	}
	fp2, _ := onnxgraph.SourceFingerprint(s2)
	s2.Close()
	exp1 := exporttest.Export(t, seed1, onnxgraph.ExportOptions{Context: 32})
	if _, err := Compare(context.Background(), openRef(t, seed2), []string{exp1}, Options{Steps: 4, Threads: 1, Fingerprint: fp2}); err == nil || !strings.Contains(err.Error(), "made from another checkpoint") {
		t.Errorf("other checkpoint: %v", err)
	}

	a := exporttest.Export(t, tied, onnxgraph.ExportOptions{Context: 16, Layers: []int{0, 1, 2, 3}})
	b := exporttest.Export(t, tied, onnxgraph.ExportOptions{Context: 16, Layers: []int{4, 5, 6, 7}})
	overlap := exporttest.Export(t, tied, onnxgraph.ExportOptions{Context: 16, Layers: []int{3, 4}})
	if rep, err := run(a, b); err != nil || !rep.Pass || len(rep.Graphs) != 10 {
		t.Errorf("union of two halves: %v %+v", err, rep)
	}
	if _, err := run(a); err == nil || !strings.Contains(err.Error(), "lack head, layers 4-7") {
		t.Errorf("half an export: %v", err)
	}
	if _, err := run(a, b, overlap); err == nil || !strings.Contains(err.Error(), "layer 3 is in both") {
		t.Errorf("overlap: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Compare(ctx, ref, []string{full}, o); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644)
	}
}

// TestVerifyPrefill: prompts of 1, N-1, N+1 and 2N+300 tokens go through
// the prefill graphs (N = 16 against a sliding window of 8, so a chunk
// spans two windows and its own tokens overwrite ring slots other tokens
// of the chunk still see; and the real N = 128) and then decode, against
// the reference at every position.
func TestVerifyPrefill(t *testing.T) {
	orttest.Init(t)
	cases := []struct {
		name string
		o    onnxgraph.ExportOptions
	}{
		{"fp32-auto-16", onnxgraph.ExportOptions{Context: 340, Prefill: 16}},
		{"fp32-ring-block-16", onnxgraph.ExportOptions{Context: 340, Prefill: 16, Layout: onnxgraph.LayoutRing, Granularity: "block"}},
		{"fp16-auto-16", onnxgraph.ExportOptions{Context: 340, Prefill: 16, DType: onnxgraph.Float16}},
		{"fp32-auto-128", onnxgraph.ExportOptions{Context: 560, Prefill: 128}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := verifyExport(t, exporttest.Golden("spark-mini-tied"), c.o, Options{Steps: 12, Seed: 3})
			if rep.Prefill == nil {
				t.Fatal("no prefill report")
			}
			n := c.o.Prefill
			var got []int
			for _, p := range rep.Prefill.Prompts {
				got = append(got, p.Tokens)
				t.Logf("prompt %4d: %d chunks, %.1f dB (worst %s), top-1 %d/%d, chained logits %.1f dB top-1 %d/%d",
					p.Tokens, p.Chunks, float64(p.SNR), p.Worst, p.Top1, p.Positions, float64(p.Chain.SNR), p.ChainTop1, p.Positions)
				if float64(p.SNR) < rep.BarDB || !p.Pass || p.Positions != PrefillDecode+1 {
					t.Errorf("prompt %d: %+v", p.Tokens, p)
				}
			}
			if want := []int{1, n - 1, n + 1, 2*n + 300}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("prompts %v, want %v", got, want)
			}
			if !rep.Pass {
				t.Errorf("verify failed: %v", rep.Failures)
			}
		})
	}
}

// TestVerifyPrefillShards: the folders of a --layers matrix with prefill
// graphs verify as one export, prefill check included; parts with other
// prefill sizes are refused, and so is a changed shared weights file,
// named before anything runs.
func TestVerifyPrefillShards(t *testing.T) {
	orttest.Init(t)
	tied := exporttest.Golden("spark-mini-tied")
	ref := openRef(t, tied)
	o := Options{Steps: 4, Seed: 1, Threads: 1, Prompts: []int{3, 9}}
	run := func(dirs ...string) (*Report, error) { return Compare(context.Background(), ref, dirs, o) }
	a := exporttest.Export(t, tied, onnxgraph.ExportOptions{Context: 16, Prefill: 4, Layers: []int{0, 1, 2, 3}})
	b := exporttest.Export(t, tied, onnxgraph.ExportOptions{Context: 16, Prefill: 4, Layers: []int{4, 5, 6, 7}})
	rep, err := run(a, b)
	if err != nil || !rep.Pass || len(rep.Graphs) != 19 || rep.Prefill == nil || len(rep.Prefill.Prompts) != 2 {
		t.Fatalf("union with prefill graphs: %v %+v", err, rep)
	}
	for _, p := range rep.Prefill.Prompts {
		if p.Chunks != (p.Tokens+3)/4 || !p.Pass {
			t.Errorf("prompt %+v", p)
		}
	}
	other := exporttest.Export(t, tied, onnxgraph.ExportOptions{Context: 16, Prefill: 8, Layers: []int{4, 5, 6, 7}})
	if _, err := run(a, other); err == nil || !strings.Contains(err.Error(), "prefill tokens 4 vs 8") {
		t.Errorf("parts with other prefill sizes: %v", err)
	}
	if _, err := Compare(context.Background(), ref, []string{a, b}, Options{Steps: 4, Threads: 1, Prompts: []int{13}}); err == nil || !strings.Contains(err.Error(), "prompt of 13 tokens") {
		t.Errorf("a prompt past the context less the decode steps: %v", err)
	}
	f, _ := os.OpenFile(filepath.Join(b, "layer_05.data"), os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte{0})
	f.Close()
	if _, err := run(a, b); err == nil || !strings.Contains(err.Error(), "layer_05.data: sha256") {
		t.Errorf("changed shared weights: %v", err)
	}
}
