package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sparkconv/corpus"
	"sparkconv/fixtures/fixturestest"
	"sparkconv/qnn"
	"sparkconv/qnnbundle"
)

// TestQNNBundleCommand: the tiny fixture's export (context 64, the window
// of 16 wraps) bundled at w8a16 and w16a16: every graph's folder, npz and
// QDQ graph is there, bundle.json carries a finite simulated SNR per graph,
// w16a16 beats w8a16 on every layer, the pairs lint clean, a misnamed or
// in-pattern encoding fails the lint by rule, and w8a8 is refused (exit 1,
// nothing written) without --force; w4a16 likewise, and with --force its
// pairs lint clean.
func TestQNNBundleCommand(t *testing.T) {
	requireORT(t)
	model := fixturestest.Tiny(t, false)
	dir := t.TempDir()
	export := filepath.Join(dir, "onnx")
	mustRun(t, "export-onnx", "--model", model, "--out", export, "--context", "64")
	snr := map[string]map[string]float64{}
	forced := false
	for _, prec := range []string{"w8a16", "w16a16", "w8a8"} {
		out := filepath.Join(dir, prec)
		stdout := mustRun(t, "qnn-bundle", "--model", model, "--export", export, "--out", out, "--precision", prec,
			"--positions", "4", "--observe", "32", "--held-out", "4", "--threads", "1", "--json", "--force")
		var b qnnbundle.Bundle
		if err := json.Unmarshal([]byte(stdout), &b); err != nil {
			t.Fatalf("%s: --json: %v\n%s", prec, err, stdout)
		}
		if b.Precision != prec || len(b.Graphs) != 6 || b.Calibration.Tokens != 64 || len(b.Calibration.HeldOut) != 4 || b.Mask.EncodedRange[0] != qnn.MaskClip {
			t.Fatalf("%s: bundle.json %+v", prec, b)
		}
		onDisk, _ := os.ReadFile(filepath.Join(out, qnnbundle.BundleFile))
		for _, key := range []string{`"snr_db"`, `"snr_worst_sequence_db"`, `"worst_sequence_sample"`, `"worst_position_sample"`, `"held_out_sequences"`} {
			if !strings.Contains(string(onDisk), key) {
				t.Errorf("%s: bundle.json lacks %s", prec, key)
			}
		}
		// The built-in held-out text: every sample a sequence.
		if n := strings.Count(corpus.HeldOut, "\n---\n") + 1; len(b.Calibration.HeldOutSequences) != n || len(b.Graphs["layer_00"].SNRSequences) != n {
			t.Errorf("%s: %d held-out sequences, layer_00 has %d SNRs; want %d", prec, len(b.Calibration.HeldOutSequences), len(b.Graphs["layer_00"].SNRSequences), n)
		}
		snr[prec] = map[string]float64{}
		for name, g := range b.Graphs {
			if g.SNR == nil {
				t.Fatalf("%s %s: no simulated SNR", prec, name)
			}
			snr[prec][name] = *g.SNR
			for _, f := range append(g.Files, g.CalibFile, qnnbundle.QDQDir+"/"+name+".onnx") {
				if _, err := os.Stat(filepath.Join(out, f)); err != nil {
					t.Errorf("%s: %v", prec, err)
				}
			}
		}
		if prec == "w8a8" {
			forced = b.Forced
		} else if b.Forced {
			t.Errorf("%s needed --force: %s", prec, b.ForcedBecause)
		}
		if b.Graphs["head"].Top1 == nil {
			t.Errorf("%s: head has no top-1 agreement", prec)
		}
	}
	for name, v := range snr["w8a16"] {
		if strings.HasPrefix(name, "layer_") && (snr["w16a16"][name] <= v || snr["w8a8"][name] >= v) {
			t.Errorf("%s: w16a16 %.1f dB, w8a16 %.1f dB, w8a8 %.1f dB: not in that order", name, snr["w16a16"][name], v, snr["w8a8"][name])
		}
		t.Logf("%s: w16a16 %.1f dB, w8a16 %.1f dB, w8a8 %.1f dB", name, snr["w16a16"][name], v, snr["w8a8"][name])
	}

	aimet := filepath.Join(dir, "w8a16", "layer_01.aimet")
	graph, enc := filepath.Join(aimet, "layer_01.onnx"), filepath.Join(aimet, "layer_01.encodings")
	mustRun(t, "lint", graph, "--encodings", enc)
	data, _ := os.ReadFile(enc)
	bad := strings.Replace(string(data), `"name": "layers.1/q_rope"`, `"name": "/layers.1/attn/q_rope"`, 1)
	bad = strings.Replace(bad, `"name": "layers.1/mlp_act"`, `"name": "layers.1/attn_norm/Sqrt_0"`, 1)
	badPath := filepath.Join(dir, "bad.encodings")
	os.WriteFile(badPath, []byte(bad), 0o644)
	stdout, _, code := run(t, "lint", graph, "--encodings", badPath)
	if code != 1 || !strings.Contains(stdout, "encoding-unknown-tensor") || !strings.Contains(stdout, "/layers.1/attn/q_rope") ||
		!strings.Contains(stdout, "encoding-in-fused-pattern") {
		t.Errorf("lint of a bad pair: exit %d\n%s", code, stdout)
	}

	// Without --force a bundle below the bar is refused and nothing is written.
	refused := filepath.Join(dir, "w8a8-refused")
	_, stderr, code := run(t, "qnn-bundle", "--model", model, "--export", export, "--out", refused, "--precision", "w8a8",
		"--positions", "4", "--observe", "32", "--held-out", "4", "--threads", "1")
	switch {
	case forced && (code != 1 || !strings.Contains(stderr, "refused: w8a8 simulates at") || !strings.Contains(stderr, "--force")):
		t.Errorf("w8a8 below the bar: exit %d\n%s", code, stderr)
	case forced:
		if _, err := os.Stat(refused); err == nil {
			t.Error("a refused bundle left its folder")
		}
	case code != 0:
		t.Errorf("w8a8 above the bar, yet exit %d\n%s", code, stderr)
	}
	// --held-out-samples, repeatable: each file's samples are sequences, in
	// order; a missing file is named before any work.
	a, jl := filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.jsonl")
	parts := strings.SplitN(corpus.HeldOut, "\n---\n", 3)
	os.WriteFile(a, []byte(parts[0]+"\n---\n"+parts[1]), 0o644)
	os.WriteFile(jl, []byte(`{"text": "[{\"role\": \"tool\", \"content\": \"{\\\"ok\\\": true, \\\"n\\\": 42}\"}]"}`+"\n"), 0o644)
	stdout = mustRun(t, "qnn-bundle", "--model", model, "--export", export, "--out", filepath.Join(dir, "held"),
		"--positions", "4", "--observe", "32", "--held-out", "4", "--threads", "1", "--json", "--held-out-samples", a, "--held-out-samples", jl)
	var hb qnnbundle.Bundle
	if err := json.Unmarshal([]byte(stdout), &hb); err != nil {
		t.Fatal(err)
	}
	if f, s := hb.Calibration.HeldOutFiles, hb.Calibration.HeldOutSequences; len(f) != 2 || f[0].Source != a || f[1].Source != jl || len(f[0].SHA256) != 64 ||
		len(s) != 3 || s[1].Source != a || s[1].Sample != 2 || s[2].Source != jl {
		t.Errorf("--held-out-samples twice: files %+v, sequences %+v", f, s)
	}
	// Text unlike the calibration's (zeros, numbers, CJK, nested JSON, one
	// repeated word) beside three built-in samples, with the ranges as
	// observed on one stream of calibration text (--headroom 1
	// --calib-sequences 0): every layer's pooled SNR passes the bar and
	// one sequence of a layer does not, so the bundle is refused by that
	// sequence, and written with --force saying why.
	var nums []string
	for i := range 80 {
		nums = append(nums, strconv.Itoa(i*7919*104729%1000000007))
	}
	builtin := strings.SplitN(corpus.HeldOut, "\n---\n", 4)[:3]
	odd := filepath.Join(dir, "odd.txt")
	os.WriteFile(odd, []byte(strings.Join(append(builtin, strings.Repeat("0", 400), strings.Join(nums, " "),
		strings.Repeat("東京都の天気は晴れです。明日は雨が降るでしょう。", 10), strings.Repeat(`{"a":`, 60),
		strings.Repeat("zzzzzzzzzzzzzzzzzzzzzzzzzz ", 40)), "\n---\n")+"\n"), 0o644)
	oddArgs := []string{"qnn-bundle", "--model", model, "--export", export, "--precision", "w8a16", "--headroom", "1", "--calib-sequences", "0",
		"--positions", "4", "--observe", "16", "--held-out", "64", "--held-out-positions", "64", "--threads", "1", "--held-out-samples", odd}
	stdout = mustRun(t, append(oddArgs, "--out", filepath.Join(dir, "odd"), "--force", "--json")...)
	var ob qnnbundle.Bundle
	if err := json.Unmarshal([]byte(stdout), &ob); err != nil {
		t.Fatal(err)
	}
	failing := ""
	for _, name := range ob.GraphOrder {
		g := ob.Graphs[name]
		if !strings.HasPrefix(name, "layer_") {
			continue
		}
		if *g.SNR < qnnbundle.BarDB {
			t.Errorf("%s: pooled %.2f dB, below the bar: the case no longer separates the pooled SNR from the worst sequence", name, *g.SNR)
		}
		if *g.SNRWorstSeq < qnnbundle.BarDB && failing == "" {
			failing = fmt.Sprintf("on %s in held-out sequence %d (%s sample %d)", name, g.WorstSeq, odd, g.WorstSeq+1)
		}
		t.Logf("odd text, %s: pooled %.2f dB, worst sequence %.2f dB (%d), worst position %.2f dB (%d of %d)", name, *g.SNR, *g.SNRWorstSeq, g.WorstSeq, *g.SNRWorst, g.WorstPos, g.WorstPosSeq)
	}
	if failing == "" || !ob.Forced || !strings.Contains(ob.ForcedBecause, failing) {
		t.Errorf("odd text: failing %q, forced %v: %s", failing, ob.Forced, ob.ForcedBecause)
	}
	if _, stderr, code := run(t, append(oddArgs, "--out", filepath.Join(dir, "odd-refused"))...); code != 1 ||
		!strings.Contains(stderr, "refused: w8a16 simulates at") || !strings.Contains(stderr, failing) || !strings.Contains(stderr, "pooled over the 8 held-out sequences") {
		t.Errorf("odd text without --force: exit %d\n%s", code, stderr)
	} else if _, err := os.Stat(filepath.Join(dir, "odd-refused")); err == nil {
		t.Error("a refused bundle left its folder")
	}

	missing := filepath.Join(dir, "missing.txt")
	if _, stderr, code := run(t, "qnn-bundle", "--model", model, "--export", export, "--out", filepath.Join(dir, "y"),
		"--held-out-samples", a, "--held-out-samples", missing); code != 1 || !strings.Contains(stderr, missing) {
		t.Errorf("a missing --held-out-samples file: exit %d\n%s", code, stderr)
	}
	// w4a16 on the fixture's random weights simulates below the bar: with
	// --promote-below 0 it is refused without --force; at the default
	// every layer is rebuilt with 8-bit weights and clears the bar, and
	// bundle.json says so; every pair lints clean and bundle.json records
	// the recipe and each layer's weight search.
	w4 := filepath.Join(dir, "w4a16")
	w4args := []string{"qnn-bundle", "--model", model, "--export", export, "--out", w4, "--precision", "w4a16",
		"--positions", "4", "--observe", "32", "--held-out", "4", "--threads", "1"}
	_, stderr, code = run(t, append(w4args, "--promote-below", "0")...)
	if code != 1 || !strings.Contains(stderr, "refused: w4a16 simulates at") {
		t.Errorf("w4a16 without --force: exit %d\n%s", code, stderr)
	}
	stdout = mustRun(t, append(w4args, "--json")...)
	var b4 qnnbundle.Bundle
	if err := json.Unmarshal([]byte(stdout), &b4); err != nil {
		t.Fatalf("w4a16: --json: %v\n%s", err, stdout)
	}
	if b4.WeightBits != 4 || b4.Recipe == nil || b4.Recipe.HeadBits != 8 || b4.Recipe.KVBits != 8 || b4.Forced ||
		b4.PromoteBelow != qnnbundle.BarDB || !strings.HasPrefix(b4.Recipe.PromotedGrid, "8-bit symmetric per output channel") ||
		!slices.Equal(b4.Promoted, []string{"layer_00", "layer_01", "layer_02", "layer_03"}) {
		t.Errorf("w4a16 bundle.json: %+v, recipe %+v", b4, b4.Recipe)
	}
	for name, g := range b4.Graphs {
		if strings.HasPrefix(name, "layer_") {
			if g.Search == nil || g.Search.Weights != 8 {
				t.Errorf("w4a16 %s: weight search %+v", name, g.Search)
			}
			if p := g.Promoted; g.WeightBits != 8 || p == nil || p.FromBits != 4 || p.SNRWorstSeq == nil || *p.SNRWorstSeq >= qnnbundle.BarDB ||
				*g.SNRWorstSeq < qnnbundle.BarDB {
				t.Errorf("w4a16 %s: weight bits %d, promoted from %+v, worst sequence %v", name, g.WeightBits, p, *g.SNRWorstSeq)
			}
		}
		aimet := filepath.Join(w4, name+".aimet")
		mustRun(t, "lint", filepath.Join(aimet, name+".onnx"), "--encodings", filepath.Join(aimet, name+".encodings"))
	}
	for _, args := range [][]string{{"--promote-below", "-1"}, {"--promote-below", "101"}, {"--promote-below", "NaN"}, {"--promote-below", "10"}} {
		a := append([]string{"qnn-bundle", "--model", model, "--export", export, "--out", filepath.Join(dir, "x"), "--precision", "w8a16"}, args...)
		if _, stderr, code := run(t, a...); code != 2 || !strings.Contains(stderr, "--promote-below") {
			t.Errorf("%v: exit %d, want 2\n%s", args, code, stderr)
		}
	}
	for _, args := range [][]string{
		{"--precision", "w4a8"}, {"--positions", "0"}, {"--mask-clip", "0"}, {"--held-out", "-1"}, {"--held-out-samples", ""},
	} {
		a := append([]string{"qnn-bundle", "--model", model, "--export", export, "--out", filepath.Join(dir, "x")}, args...)
		if _, _, code := run(t, a...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
