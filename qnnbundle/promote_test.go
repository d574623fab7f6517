package qnnbundle

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"sparkconv/onnxgraph"
	"sparkconv/ortrun/orttest"
	"sparkconv/qnn"
)

// TestPromoteBelow bundles the tiny export (with prefill graphs) at
// w4a16-lpbq twice: as it is, and with PromoteBelow in the widest gap
// between the layers' worst-sequence SNRs. Exactly the decode layer graphs under the threshold
// are promoted, in graph order: they and their prefill graphs hold 8-bit
// per-channel weights that lint clean (the prefill graph's the decode
// graph's), each records its 4-bit figures (the first bundle's) and now
// simulates higher on its worst sequence; every other graph's files are
// the first bundle's byte for byte, and no file of the 4-bit build is left.
func TestPromoteBelow(t *testing.T) {
	orttest.Init(t)
	_, man, build := tinyPrefillBundles(t)
	prec, err := qnn.ParsePrecision("w4a16-lpbq")
	if err != nil {
		t.Fatal(err)
	}
	b0, out0 := build(prec)
	var worst []float64
	for _, e := range onnxgraph.GraphOrder(man) {
		if r := b0.Graphs[e.Name]; r.isLayer() {
			worst = append(worst, *r.SNRWorstSeq)
		}
	}
	sort.Float64s(worst)
	gap := 0 // the threshold goes in the widest gap: worst[gap] < below < worst[gap+1]
	for i := range worst[:len(worst)-1] {
		if worst[i+1]-worst[i] > worst[gap+1]-worst[gap] {
			gap = i
		}
	}
	if worst[gap+1]-worst[gap] < 0.5 {
		t.Fatalf("layers' worst-sequence SNRs %v: no gap to put the threshold in", worst)
	}
	below := (worst[gap] + worst[gap+1]) / 2
	b1, out1 := build(prec, func(o *Options) { o.PromoteBelow = below })
	if b1.PromoteBelow != below || b1.Recipe == nil || b1.Recipe.PromotedGrid == "" {
		t.Errorf("bundle: promote below %g, recipe %+v", b1.PromoteBelow, b1.Recipe)
	}
	var want []string
	for _, e := range onnxgraph.GraphOrder(man) {
		if r := b0.Graphs[e.Name]; r.isLayer() && *r.SNRWorstSeq < below {
			want = append(want, e.Name)
		}
	}
	if !slices.Equal(b1.Promoted, want) || len(want) != gap+1 {
		t.Fatalf("promoted %v, want %v (threshold %.2f dB, layers %v)", b1.Promoted, want, below, worst)
	}
	for _, e := range man.AllGraphs() {
		r0, r1 := b0.Graphs[e.Name], b1.Graphs[e.Name]
		dec := e.Name
		if e.Decode != "" {
			dec = e.Decode
		}
		if !slices.Contains(want, dec) {
			if r1.WeightBits != 0 || r1.Promoted != nil {
				t.Errorf("%s: weight bits %d, promoted %+v", e.Name, r1.WeightBits, r1.Promoted)
			}
			for _, f := range []string{e.Name + ".aimet/" + e.Name + ".encodings", QDQDir + "/" + e.File, r0.CalibFile} {
				sameFile(t, filepath.Join(out0, f), filepath.Join(out1, f))
			}
			continue
		}
		if r1.WeightBits != qnn.PromotedBits {
			t.Errorf("%s: weight bits %d", e.Name, r1.WeightBits)
		}
		if e.Decode == "" {
			p := r1.Promoted
			if p == nil || p.FromBits != 4 || *p.SNRWorstSeq != *r0.SNRWorstSeq || *p.SNR != *r0.SNR || !(*r1.SNRWorstSeq > *p.SNRWorstSeq) {
				t.Errorf("%s: promoted from %+v (4-bit build: %.2f dB worst sequence), now %.2f dB", e.Name, p, *r0.SNRWorstSeq, *r1.SNRWorstSeq)
			}
			t.Logf("%s: worst sequence %.2f dB at 4 bits, %.2f at 8", e.Name, *p.SNRWorstSeq, *r1.SNRWorstSeq)
		}
		dir := filepath.Join(out1, e.Name+".aimet")
		rep, err := qnn.LintFile(filepath.Join(dir, e.Name+".onnx"), filepath.Join(dir, e.Name+".encodings"))
		if err != nil || rep.Errors+rep.Warnings != 0 {
			t.Errorf("%s: lint --encodings: %v %+v", e.Name, err, rep)
		}
		f, de := readEnc(t, out1, e.Name), readEnc(t, out1, dec)
		for _, p := range f.Params {
			if strings.HasSuffix(p.Name, "proj.weight_T") && (p.EncType != qnn.PerChannel || p.BW != qnn.PromotedBits) {
				t.Errorf("%s %s: %s %d bits", e.Name, p.Name, p.EncType, p.BW)
			}
			if w, _ := findEnc(de.Params, p.Name); !w.Same(p) {
				t.Errorf("%s parameter %s: not the decode graph's grid", e.Name, p.Name)
			}
		}
	}
	// No file of a 4-bit build is left: every file of the promoted bundle
	// is bundle.json, the output marker, a QDQ graph or an npz, or one a
	// graph lists (its .onnx, .encodings and weights file).
	listed := map[string]bool{"bundle.json": true, ".sparkconv-output": true}
	for _, r := range b1.Graphs {
		listed[r.CalibFile] = true
		for _, f := range r.Files {
			listed[f] = true
		}
	}
	filepath.WalkDir(out1, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(out1, path)
		if !listed[rel] && filepath.Dir(rel) != QDQDir {
			t.Errorf("promoted bundle: %s is no graph's file", rel)
		}
		return nil
	})
}

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(x, y) {
		t.Errorf("%s: not the unpromoted bundle's bytes", b)
	}
}
