package qnnbundle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sparkconv/corpus"
	"sparkconv/fixtures/fixturestest"
	"sparkconv/onnxgraph"
	"sparkconv/onnxgraph/exporttest"
	"sparkconv/ortrun/orttest"
	"sparkconv/qnn"
	"sparkconv/quant"
	"sparkconv/tokenizer"
)

// dbOf is the SNR of noise-to-signal ratios, each position weighted
// equally: 10 log10(n / Σ nsr).
func dbOf(nsr ...float64) float64 {
	s := 0.0
	for _, r := range nsr {
		s += r
	}
	return -10 * math.Log10(s/float64(len(nsr)))
}

// TestSeqSNR: the pooled SNR weighs every position of every sequence
// equally, each sequence's SNR is over its own positions, the worst
// sequence and the worst position (with its sequence) are named, and a
// sequence that was not scored is NaN, never the worst.
func TestSeqSNR(t *testing.T) {
	type pt struct {
		seq, pos int
		nsr      float64 // SumErrSq / SumSq, SumSq = 1e6 (a sink's norm must not matter)
	}
	for _, c := range []struct {
		name       string
		n          int
		pts        []pt
		pooled     float64
		seqs       []float64
		worstSeq   int
		worstPos   int
		worstPosSq int
	}{
		{
			// Sequence 1 holds one bad position among four: pooled over 12
			// positions it passes 20 dB, on its own it does not.
			name: "one sequence out of its ranges", n: 3,
			pts: []pt{
				{0, 0, 1e-4}, {0, 1, 1e-4}, {0, 2, 1e-4}, {0, 3, 1e-4},
				{1, 0, 1e-4}, {1, 1, 1e-4}, {1, 2, 0.09}, {1, 3, 1e-4},
				{2, 0, 1e-4}, {2, 1, 1e-4}, {2, 2, 1e-4}, {2, 3, 1e-4},
			},
			pooled:   dbOf(1e-4, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4, 0.09, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4),
			seqs:     []float64{40, dbOf(1e-4, 1e-4, 0.09, 1e-4), 40},
			worstSeq: 1, worstPos: 2, worstPosSq: 1,
		},
		{
			// The worst position's sequence is not the worst sequence; a
			// later position equal to the worst does not move it; sequence 2
			// was never scored.
			name: "worst position elsewhere", n: 3,
			pts:      []pt{{0, 0, 0.01}, {0, 1, 0.01}, {1, 0, 0.001}, {1, 1, 0.03}, {1, 2, 0.03}, {0, 2, 0.03}},
			pooled:   dbOf(0.01, 0.01, 0.001, 0.03, 0.03, 0.03),
			seqs:     []float64{dbOf(0.01, 0.01, 0.03), dbOf(0.001, 0.03, 0.03), math.NaN()},
			worstSeq: 1, worstPos: 1, worstPosSq: 1,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			var a seqSNR
			for _, p := range c.pts {
				a.add(p.seq, p.pos, quant.ErrStats{SumSq: 1e6, SumErrSq: p.nsr * 1e6})
			}
			r := a.result(c.n)
			near := func(got, want float64) bool {
				return math.IsNaN(got) && math.IsNaN(want) || math.Abs(got-want) < 1e-9
			}
			if !near(r.SNR, c.pooled) {
				t.Errorf("pooled %v dB, want %v", r.SNR, c.pooled)
			}
			if len(r.Sequences) != c.n {
				t.Fatalf("%d sequences, want %d", len(r.Sequences), c.n)
			}
			for i, want := range c.seqs {
				if !near(r.Sequences[i], want) {
					t.Errorf("sequence %d: %v dB, want %v", i, r.Sequences[i], want)
				}
			}
			if r.WorstSeqIdx != c.worstSeq || !near(r.WorstSeq, c.seqs[c.worstSeq]) {
				t.Errorf("worst sequence %d at %v dB, want %d at %v", r.WorstSeqIdx, r.WorstSeq, c.worstSeq, c.seqs[c.worstSeq])
			}
			if r.WorstPos != c.worstPos || r.WorstPosSeq != c.worstPosSq {
				t.Errorf("worst position %d of sequence %d, want %d of %d", r.WorstPos, r.WorstPosSeq, c.worstPos, c.worstPosSq)
			}
			if r.WorstSeq > r.SNR {
				t.Errorf("worst sequence %v dB above the pooled %v", r.WorstSeq, r.SNR)
			}
		})
	}
	if c := (dbOf(1e-4, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4, 0.09, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4)); c < BarDB || dbOf(1e-4, 1e-4, 0.09, 1e-4) >= BarDB {
		t.Fatalf("the first case no longer straddles the bar: pooled %.1f dB", c)
	}
}

// TestRefusalWorstSequence: the bar applies to each layer's worst held-out
// sequence: a layer whose pooled SNR passes and one of whose sequences
// does not is refused, by graph, sequence (and its source sample) and dB;
// the embedding and the head are not held to it; a bundle whose every
// layer holds on every sequence passes.
func TestRefusalWorstSequence(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	seqs := []HeldOutSequence{{Source: "prose.txt", Sample: 1}, {Source: "prose.txt", Sample: 2}, {Source: "tools.jsonl", Sample: 1}}
	bundle := func(graphs map[string]*GraphResult, order ...string) *Bundle {
		b := &Bundle{Precision: "w8a16", Graphs: graphs, GraphOrder: order}
		b.Calibration.HeldOutSequences = seqs
		return b
	}
	layer := func(pooled, worst float64, seq int) *GraphResult {
		return &GraphResult{Kind: onnxgraph.KindLayer, SNR: f(pooled), SNRWorstSeq: f(worst), WorstSeq: seq}
	}
	for _, c := range []struct {
		name string
		b    *Bundle
		want []string // "" : passes
	}{
		{"pooled passes, one sequence fails", bundle(map[string]*GraphResult{
			"layer_00": layer(41, 38, 0), "layer_01": layer(24.6, 15.24, 2), "layer_02": layer(33, 19.96, 1),
		}, "layer_00", "layer_01", "layer_02"), []string{"w8a16 simulates at 15.24 dB on layer_01 in held-out sequence 2 (tools.jsonl sample 1)", "24.60 dB pooled over the 3 held-out sequences", "bar 20 dB"}},
		{"just under the bar", bundle(map[string]*GraphResult{"block_00": {Kind: onnxgraph.KindBlock, SNR: f(30), SNRWorstSeq: f(19.99), WorstSeq: 1}}, "block_00"),
			[]string{"at 19.99 dB on block_00 in held-out sequence 1 (prose.txt sample 2)"}},
		{"every sequence holds", bundle(map[string]*GraphResult{"layer_00": layer(41, 20, 0), "layer_01": layer(30, 29, 1)}, "layer_00", "layer_01"), nil},
		{"head and embed are not held to the bar", bundle(map[string]*GraphResult{
			"embed": {Kind: onnxgraph.KindEmbed, SNR: f(12), SNRWorstSeq: f(5), WorstSeq: 0},
			"head":  {Kind: onnxgraph.KindHead, SNR: f(15), SNRWorstSeq: f(3), WorstSeq: 1},
		}, "embed", "head"), nil},
		{"an exact layer passes", bundle(map[string]*GraphResult{"layer_00": {Kind: onnxgraph.KindLayer}}, "layer_00"), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			why := c.b.Refusal()
			if (why == "") != (c.want == nil) {
				t.Fatalf("Refusal() = %q, want it to hold %q", why, c.want)
			}
			for _, s := range c.want {
				if !strings.Contains(why, s) {
					t.Errorf("Refusal() = %q, lacks %q", why, s)
				}
			}
		})
	}
}

// TestReadHeldOut: each sample of each file is a sequence of its own,
// cut to the first n tokens (a shorter one keeps all of its tokens), with
// its file and 1-based sample; each file is recorded with the sha256 of
// its bytes; without files the built-in held-out text is read; a missing
// file is named; too many positions are refused with the numbers.
func TestReadHeldOut(t *testing.T) {
	tok, err := tokenizer.Load(filepath.Join(exporttest.Golden("spark-mini-tied"), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	prose := filepath.Join(dir, "prose.txt")
	long := strings.Repeat("The keeper wrote the hour the lamp was lit. ", 20)
	proseText := long + "\n---\nok\n"
	os.WriteFile(prose, []byte(proseText), 0o644)
	tools := filepath.Join(dir, "tools.jsonl")
	toolsText := `{"text": "{\"tool\": \"search\", \"result\": [1, 2, 3]}"}` + "\n"
	os.WriteFile(tools, []byte(toolsText), 0o644)
	h, err := ReadHeldOut(tok, []string{prose, tools}, 16, 5, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Seqs) != 3 || len(h.Files) != 2 {
		t.Fatalf("sequences %+v, files %+v", h.Seqs, h.Files)
	}
	sum := func(s string) string { x := sha256.Sum256([]byte(s)); return hex.EncodeToString(x[:]) }
	if h.Files[0] != (HeldOutFile{prose, sum(proseText), 2}) || h.Files[1] != (HeldOutFile{tools, sum(toolsText), 1}) {
		t.Errorf("files %+v", h.Files)
	}
	for i, want := range []struct {
		src    string
		sample int
	}{{prose, 1}, {prose, 2}, {tools, 1}} {
		s := h.Seqs[i]
		if s.Source != want.src || s.Sample != want.sample || s.Window != min(s.Tokens, 16) || len(h.ids[i]) != s.Window ||
			!slices.Equal(s.Positions, ScoredPositions(5, s.Window)) {
			t.Errorf("sequence %d: %+v (%d ids), want %s sample %d", i, s, len(h.ids[i]), want.src, want.sample)
		}
	}
	if h.Seqs[0].Tokens <= 16 || h.Seqs[0].Window != 16 || !slices.Equal(h.Seqs[0].Positions, []int{0, 1, 3, 7, 15}) ||
		h.Seqs[1].Tokens >= 5 || len(h.Seqs[1].Positions) != h.Seqs[1].Tokens || h.Longest() != 16 {
		t.Errorf("cut to 16: %+v", h.Seqs)
	}
	ids, _ := tok.Encode(long, true)
	for p := range 16 {
		if h.ids[0][p] != ids[p] {
			t.Fatalf("sequence 0 position %d: id %d, the sample's own encoding has %d", p, h.ids[0][p], ids[p])
		}
	}

	b, err := ReadHeldOut(tok, nil, 8, 8, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(corpus.HeldOut, "\n---\n") + 1; len(b.Seqs) != n || len(b.Files) != 1 || b.Files[0].Source != corpus.HeldOutName || b.Files[0].SHA256 != sum(corpus.HeldOut) {
		t.Errorf("built-in: %d sequences (want %d), files %+v", len(b.Seqs), n, b.Files)
	}

	missing := filepath.Join(dir, "nope.txt")
	if _, err := ReadHeldOut(tok, []string{prose, missing}, 8, 8, 1<<20); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: %v", err)
	}
	big := filepath.Join(dir, "big.txt")
	sample := strings.Repeat("lamp sea ship ", 1500)
	os.WriteFile(big, []byte(strings.Repeat(sample+"\n---\n", 4)+sample), 0o644)
	if _, err := ReadHeldOut(tok, []string{big}, 4096, 8, 1<<20); err == nil || !strings.Contains(err.Error(), "more than 16384 tokens to trace (5 samples so far, at most --held-out 4096 tokens each)") {
		t.Errorf("too many positions: %v", err)
	}
}

// TestBuildHeldOutSequences bundles the tiny model with two held-out
// files: bundle.json lists the files and every sample as a sequence, each
// graph has one SNR per sequence, the worst sequence is the lowest of
// them and no higher than the pooled SNR, and the worst position names a
// sequence that was scored.
func TestBuildHeldOutSequences(t *testing.T) {
	orttest.Init(t)
	model := fixturestest.Tiny(t, false)
	export := exporttest.Export(t, model, onnxgraph.ExportOptions{Context: 32})
	dir := t.TempDir()
	parts := strings.SplitN(corpus.HeldOut, "\n---\n", 4)
	a, b := filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.jsonl")
	os.WriteFile(a, []byte(parts[0]+"\n---\n"+parts[1]), 0o644)
	os.WriteFile(b, []byte(`{"text": "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 3}}"}`+"\n"), 0o644)
	out := filepath.Join(dir, "qnn")
	bu, err := Run(context.Background(), Options{Model: model, Export: export, Out: out, Precision: qnn.Precisions[0],
		Positions: 3, Observe: 16, HeldOut: 12, HeldOutPositions: 6, HeldOutSamples: []string{a, b}, MaskClip: qnn.MaskClip, Headroom: qnn.Headroom, Threads: 1, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	c := bu.Calibration
	if len(c.HeldOutFiles) != 2 || c.HeldOutFiles[0].Source != a || c.HeldOutFiles[1].Source != b || len(c.HeldOutSequences) != 3 ||
		c.HeldOutSequences[2].Source != b || c.HeldOutSequences[1].Sample != 2 || !slices.Equal(c.HeldOut, []int{0, 1, 2, 3, 6, 11}) {
		t.Fatalf("calibration %+v", c)
	}
	for _, name := range bu.GraphOrder {
		r := bu.Graphs[name]
		want := 0
		for _, s := range c.HeldOutSequences {
			want += len(s.Positions)
		}
		if len(r.SNRSequences) != 3 || r.SNR == nil || r.SNRWorstSeq == nil || r.SNRWorst == nil || r.Held != want {
			t.Fatalf("%s: %+v", name, r)
		}
		lowest := math.Inf(1)
		for _, v := range r.SNRSequences {
			if v != nil {
				lowest = math.Min(lowest, *v)
			}
		}
		if *r.SNRWorstSeq != lowest || *r.SNRSequences[r.WorstSeq] != lowest || *r.SNRWorstSeq > *r.SNR || *r.SNRWorst > *r.SNRWorstSeq {
			t.Errorf("%s: pooled %v, sequences %v, worst %v (%d), worst position %v", name, *r.SNR, r.SNRSequences, *r.SNRWorstSeq, r.WorstSeq, *r.SNRWorst)
		}
		if r.WorstPosSeq < 0 || r.WorstPosSeq >= 3 || !slices.Contains(c.HeldOutSequences[r.WorstPosSeq].Positions, r.WorstPos) {
			t.Errorf("%s: worst position %d of sequence %d", name, r.WorstPos, r.WorstPosSeq)
		}
		t.Logf("%s: pooled %.1f dB, worst sequence %.1f dB (%d), worst position %.1f dB (%d of %d)", name, *r.SNR, *r.SNRWorstSeq, r.WorstSeq, *r.SNRWorst, r.WorstPos, r.WorstPosSeq)
		n := policyCount(t, name, r, readEnc(t, out, name))
		switch {
		case name == "embed" && n[qnn.PolicyTable] != 1:
			t.Errorf("embed: range policies %v, want its Gather output under %q", n, qnn.PolicyTable)
		case strings.HasPrefix(name, "layer") && (n[qnn.PolicyFixed] != 1 || n["min-max x2"] == 0 || n[qnn.PolicyBounded] == 0):
			t.Errorf("%s: range policies %v, want the mask fixed, bounded outputs and the rest at x2", name, n)
		}
	}
	if v, _ := bu.lowest(func(r *GraphResult) *float64 { return r.SNRWorstSeq }); bu.Simulation.MinSeqSNR != v || bu.Simulation.MinSeqGraph == "" {
		t.Errorf("simulation %+v", bu.Simulation)
	}
}

// TestScoredPositions: every position while k covers the window, else k
// distinct ascending positions from 0 to the window's last, dense at the
// start and spaced evenly in log(1+p) after.
func TestScoredPositions(t *testing.T) {
	for _, c := range []struct {
		k, n int
		want []int
	}{
		{32, 4, []int{0, 1, 2, 3}},
		{5, 5, []int{0, 1, 2, 3, 4}},
		{1, 100, []int{0}},
		{2, 100, []int{0, 99}},
		{5, 16, []int{0, 1, 3, 7, 15}},
		{6, 12, []int{0, 1, 2, 3, 6, 11}},
		{8, 256, []int{0, 1, 4, 10, 23, 52, 115, 255}},
		{3, 0, nil},
		{0, 10, nil},
	} {
		if got := ScoredPositions(c.k, c.n); !slices.Equal(got, c.want) {
			t.Errorf("ScoredPositions(%d, %d) = %v, want %v", c.k, c.n, got, c.want)
		}
	}
	for _, n := range []int{33, 64, 256, 1024, 4096} {
		got := ScoredPositions(DefaultHeldOutPositions, n)
		if len(got) != DefaultHeldOutPositions || got[0] != 0 || got[len(got)-1] != n-1 || !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
			t.Errorf("ScoredPositions(%d, %d) = %v", DefaultHeldOutPositions, n, got)
		}
	}
}

// TestReadCalibSequences: the first m samples of the calibration text
// (the embedded corpus without files), each cut to its window with k
// observed positions; m = 0 reads every sample.
func TestReadCalibSequences(t *testing.T) {
	tok, err := tokenizer.Load(filepath.Join(exporttest.Golden("spark-mini-tied"), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := ReadCalibSequences(tok, nil, 32, 6, 1<<20, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Seqs) != 3 || len(h.Files) != 1 || h.Files[0].Source != corpus.CalibName {
		t.Fatalf("sequences %+v, files %+v", h.Seqs, h.Files)
	}
	for i, s := range h.Seqs {
		if s.Sample != i+1 || s.Window != 32 || !slices.Equal(s.Positions, []int{0, 1, 3, 7, 15, 31}) {
			t.Errorf("sequence %d: %+v", i, s)
		}
	}
	all, err := ReadCalibSequences(tok, nil, 8, 2, 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(corpus.Calib, "\n---\n") + 1; len(all.Seqs) != n {
		t.Errorf("every sample: %d sequences, want %d", len(all.Seqs), n)
	}
}
