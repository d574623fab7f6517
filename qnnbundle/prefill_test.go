package qnnbundle

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"codeberg.org/sbinet/npyio/npz"

	"sparkconv/onnxgraph"
	"sparkconv/ortrun/orttest"
	"sparkconv/qnn"
)

// TestBundlePrefill bundles the tiny model's export with prefill graphs of
// 16 tokens (context 64, a sliding window of 16): every prefill graph gets
// its .aimet folder with the weights file it shares with its decode graph,
// encodings that lint clean and equal the decode graph's on every tensor
// the two share (weights, caches, mask, rope, the residual and the named
// points), an npz of whole chunks at the calibration text's prefill
// positions, and a QDQ graph listed under the QDQ manifest's prefill.
func TestBundlePrefill(t *testing.T) {
	orttest.Init(t)
	export, man, build := tinyPrefillBundles(t)
	b, out := build(qnn.Precisions[0])
	if b.Prefill == nil || b.Prefill.Tokens != 16 || !slices.Equal(b.Prefill.Observed, []int{0, 16, 32, 48}) ||
		!slices.Equal(b.Prefill.Chunks, []int{0, 32, 48}) || !slices.Equal(b.Prefill.HeldOut, []int{0, 16, 32, 48}) {
		t.Fatalf("bundle.json prefill: %+v", b.Prefill)
	}
	decode := map[string]onnxgraph.GraphEntry{}
	for _, g := range man.Graphs {
		decode[g.Name] = g
	}
	// Every held-out sequence is scored at the whole chunks of 16 of its
	// window (its first 64 tokens).
	chunks := 0
	for _, s := range b.Calibration.HeldOutSequences {
		chunks += s.Window / 16
	}
	if len(b.Calibration.HeldOutSequences) < 2 || chunks < 4 {
		t.Fatalf("held-out sequences %+v", b.Calibration.HeldOutSequences)
	}
	for _, pg := range man.Prefill.Graphs {
		dg := decode[pg.Decode]
		res := b.Graphs[pg.Name]
		if res == nil || res.SNR == nil || *res.SNR < BarDB || res.Samples != 3 || res.Observed != 4 || res.Held != chunks ||
			len(res.SNRSequences) != len(b.Calibration.HeldOutSequences) {
			t.Fatalf("%s: %+v", pg.Name, res)
		}
		t.Logf("%s: simulated %.1f dB (decode graph %.1f dB), %d of %d activation encodings tied", pg.Name, *res.SNR, *b.Graphs[dg.Name].SNR, res.Tied, res.Activations)
		dir := filepath.Join(out, pg.Name+".aimet")
		data, _ := os.ReadFile(filepath.Join(dir, dg.Name+".data"))
		orig, _ := os.ReadFile(filepath.Join(export, dg.Name+".data"))
		if len(data) == 0 || !bytes.Equal(data, orig) {
			t.Errorf("%s: the shared weights file is missing from its .aimet folder", pg.Name)
		}
		rep, err := qnn.LintFile(filepath.Join(dir, pg.Name+".onnx"), filepath.Join(dir, pg.Name+".encodings"))
		if err != nil || rep.Errors+rep.Warnings != 0 {
			t.Errorf("%s: lint --encodings: %v %+v", pg.Name, err, rep)
		}
		pe := readEnc(t, out, pg.Name)
		de := readEnc(t, out, dg.Name)
		tie := PrefillTies(de, dg, pg)
		if len(tie) < len(pg.Inputs)+len(pg.Outputs)-1 || res.Tied < len(tie) {
			t.Errorf("%s: %d shared tensors, %d tied encodings", pg.Name, len(tie), res.Tied)
		}
		if n := policyCount(t, pg.Name, res, pe)[qnn.PolicyDecodeTie]; n != res.Tied {
			t.Errorf("%s: %d tensors with the decode graph's policy, %d tied encodings", pg.Name, n, res.Tied)
		}
		for name, want := range tie {
			if got, _ := findEnc(pe.Activations, name); !got.Same(want) {
				t.Errorf("%s %s: %+v, the decode graph's %+v", pg.Name, name, got, want)
			}
		}
		for _, p := range pe.Params {
			if want, _ := findEnc(de.Params, p.Name); !want.Same(p) {
				t.Errorf("%s parameter %s: %+v, the decode graph's %+v", pg.Name, p.Name, p, want)
			}
		}
		r, err := npz.Open(filepath.Join(out, CalibDir, pg.Name+".npz"))
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range pg.Inputs {
			want := []int{3}
			for _, d := range in.Shape {
				want = append(want, int(d))
			}
			if h := r.Header(in.Name + ".npy"); h == nil || !slices.Equal(h.Descr.Shape, want) {
				t.Errorf("%s npz %s: %v, want shape %v", pg.Name, in.Name, h, want)
			}
		}
		r.Close()
	}
	qman, err := onnxgraph.ReadVerified(filepath.Join(out, QDQDir))
	if err != nil || qman.Prefill == nil || len(qman.Prefill.Graphs) != len(man.Prefill.Graphs) {
		t.Fatalf("QDQ manifest: %v %+v", err, qman)
	}
}

// policyCount checks a graph's range_policies name each of its activation
// encodings exactly once, each policy with its reason, and counts them by
// policy.
func policyCount(t *testing.T, graph string, res *GraphResult, enc *qnn.Encodings) map[qnn.RangePolicy]int {
	t.Helper()
	seen := map[string]bool{}
	n := map[qnn.RangePolicy]int{}
	for _, g := range res.RangePolicies {
		if g.Why == "" || len(g.Tensors) == 0 || n[g.Policy] > 0 {
			t.Errorf("%s: range policy %+v", graph, g)
		}
		for _, name := range g.Tensors {
			if seen[name] {
				t.Errorf("%s: %s under two range policies", graph, name)
			}
			seen[name] = true
		}
		n[g.Policy] += len(g.Tensors)
	}
	for _, a := range enc.Activations {
		if !seen[a.Name] {
			t.Errorf("%s: activation %s under no range policy", graph, a.Name)
		}
	}
	if len(seen) != len(enc.Activations) || len(seen) != res.Activations {
		t.Errorf("%s: %d tensors under range policies, %d activation encodings", graph, len(seen), len(enc.Activations))
	}
	return n
}
