package calib

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"sparkconv/forward"
	"sparkconv/spark"
	"sparkconv/synthetic"
	"sparkconv/tokenizer"
)

const corpusFile = "../corpus/calib.txt"

var (
	tinyOnce sync.Once
	tinyDir  string
	tinyErr  error
)

// tinyModel generates the synthetic "tiny" checkpoint (with its byte-level
// BPE tokenizer) once per test binary.
func tinyModel(t *testing.T) string {
	t.Helper()
	tinyOnce.Do(func() {
		tinyDir, tinyErr = os.MkdirTemp("", "calib-tiny-")
		if tinyErr == nil {
			tinyErr = synthetic.Generate(tinyDir, synthetic.Options{Preset: "tiny", Seed: 3})
		}
	})
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	return tinyDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if tinyDir != "" {
		os.RemoveAll(tinyDir)
	}
	os.Exit(code)
}

// setup opens the tiny model and tokenizes n corpus samples (a fixed
// random draw) into chunks of seqLen tokens.
func setup(t *testing.T, n, seqLen int) (*forward.Model, *tokenizer.Tokenizer, []Text, []Chunk) {
	t.Helper()
	dir := tinyModel(t)
	m, err := forward.Open(dir, forward.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	texts, err := ReadSamples(corpusFile)
	if err != nil {
		t.Fatal(err)
	}
	texts = Select(texts, n, 11)
	chunks, _, err := Tokenize(tok, texts, seqLen, m.Cfg.VocabSize)
	if err != nil {
		t.Fatal(err)
	}
	return m, tok, texts, chunks
}

func TestTokenizeChunks(t *testing.T) {
	_, tok, texts, chunks := setup(t, 4, 37)
	for s, txt := range texts {
		want, err := tok.Encode(txt.Text, true)
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for _, c := range chunks {
			if c.Sample != s {
				continue
			}
			if c.Start != len(got) || len(c.IDs) > 37 || len(c.IDs) == 0 {
				t.Errorf("sample %d: chunk at %d of %d tokens (have %d before it)", s, c.Start, len(c.IDs), len(got))
			}
			got = append(got, c.IDs...)
		}
		if !slices.Equal(got, want) {
			t.Errorf("sample %d: chunks hold %d tokens, the encoding %d", s, len(got), len(want))
		}
		if len(want) <= 2*37 {
			t.Errorf("sample %d has only %d tokens: the test wants samples longer than a chunk", s, len(want))
		}
	}
	if _, _, err := Tokenize(tok, texts, 37, 100); err == nil || !strings.Contains(err.Error(), "outside the model's vocab_size 100") ||
		!strings.Contains(err.Error(), "calib.txt: sample") {
		t.Errorf("ids beyond the vocabulary: error %v", err)
	}
	if _, _, err := Tokenize(tok, texts, 0, 512); err == nil {
		t.Error("seq-len 0 accepted")
	}
}

// mlpActs records one layer's down_proj input over every chunk.
type mlpActs struct {
	layer int
	x     [][]float32
}

func (a *mlpActs) Observe(layer int, p forward.Point, data []float32, cols int) {
	if layer == a.layer && p == forward.MLPAct {
		a.x = append(a.x, slices.Clone(data))
	}
}

func absMax(xs []float32) float32 {
	var m float32
	for _, v := range xs {
		m = max(m, float32(math.Abs(float64(v))))
	}
	return m
}

func TestRun(t *testing.T) {
	m, tok, texts, chunks := setup(t, 3, 64)
	c := m.Cfg
	out1, out2 := t.TempDir(), t.TempDir()
	s, err := Record(m, texts, chunks, out1, RecordOptions{SeqLen: 64, MaxSamples: 3, Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	// every token of every sample counted, in every input
	var total int64
	for _, txt := range texts {
		ids, _ := tok.Encode(txt.Text, true)
		total += int64(len(ids))
	}
	if s.Tokens != total || len(s.Inputs) != 4*c.NumLayers+1 {
		t.Fatalf("summary: %d tokens (want %d), %d inputs", s.Tokens, total, len(s.Inputs))
	}
	for _, in := range s.Inputs {
		if in.Tokens != total {
			t.Errorf("%s: %d tokens, want %d", in.Name, in.Tokens, total)
		}
	}
	// an independent pass: a full-model prefill of each chunk with dumps
	const layer = 1
	rec := &mlpActs{layer: layer}
	hidden := make([][]float32, c.NumLayers)
	var keys []float32
	for _, ch := range chunks {
		r, err := m.Prefill(ch.IDs, forward.PrefillOptions{Dump: true, Logits: forward.NoLogits, Observer: rec})
		if err != nil {
			t.Fatal(err)
		}
		for i := range hidden {
			hidden[i] = append(hidden[i], r.HiddenIn[i]...)
		}
		keys = append(keys, r.Key[layer]...)
	}
	t.Run("hessian", func(t *testing.T) {
		h, n, tokens, err := ReadHessian(out1, spark.LayerModule(layer, spark.MLPDown))
		if err != nil {
			t.Fatal(err)
		}
		if n != c.IntermediateSize || tokens != total {
			t.Fatalf("down_proj Hessian %dx%d over %d tokens", n, n, tokens)
		}
		// rows 0, 16, 32, ... of X^T X in float64 (every row costs too long)
		ref := make([]float64, n*n)
		for _, x := range rec.x {
			for r := 0; r < len(x)/n; r++ {
				row := x[r*n : (r+1)*n]
				for i := 0; i < n; i += 16 {
					dst, xi := ref[i*n:(i+1)*n], float64(row[i])
					for j, xj := range row {
						dst[j] += xi * float64(xj)
					}
				}
			}
		}
		var worst, scale float64
		for i := 0; i < n; i += 16 {
			for k := i * n; k < (i+1)*n; k++ {
				worst = max(worst, math.Abs(h[k]-ref[k]))
				scale = max(scale, math.Abs(ref[k]))
			}
		}
		t.Logf("down_proj input Hessian of layer %d: max|diff| %.3g of max %.3g over %d tokens", layer, worst, scale, tokens)
		if worst > 1e-5*scale {
			t.Errorf("Hessian differs from X^T X by %.3g (max |H| %.3g)", worst, scale)
		}
		meanSq, err := ReadChannels(out1, spark.LayerModule(layer, spark.MLPDown), SuffixMeanSq)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i += 16 {
			if d := math.Abs(float64(meanSq[i]) - ref[i*n+i]/float64(total)); d > 1e-5*ref[i*n+i]/float64(total) {
				t.Fatalf("channel %d: mean_sq %g, X^T X diagonal / tokens %g", i, meanSq[i], ref[i*n+i]/float64(total))
			}
		}
	})
	t.Run("ranges", func(t *testing.T) {
		for i, l := range s.Layers {
			if got, want := l.Ranges["hidden_in"].AbsMax, absMax(hidden[i]); got != want {
				t.Errorf("layer %d: hidden_in absmax %g, max over the prefill %g", i, got, want)
			}
		}
		if got, want := s.Layers[layer].Ranges["k_rope"].AbsMax, absMax(keys); got != want {
			t.Errorf("layer %d: K absmax %g, max over the prefill %g", layer, got, want)
		}
		for _, p := range forward.LayerPoints() {
			r, ok := s.Layers[0].Ranges[p.String()]
			if !ok || r.Min > r.Max || r.AbsMax != max(-r.Min, r.Max) {
				t.Errorf("layer 0 %s: range %+v", p, r)
			}
		}
		if p := s.Layers[3].Ranges["probs"]; p.Min < 0 || p.Max > 1 || p.Max == 0 {
			t.Errorf("probabilities range %+v", p)
		}
		hi, err := ReadChannels(out1, HeadModule, SuffixAbsMax)
		if err != nil {
			t.Fatal(err)
		}
		if absMax(hi) != s.Head["final_norm"].AbsMax {
			t.Errorf("head input absmax per channel %g, range %g", absMax(hi), s.Head["final_norm"].AbsMax)
		}
	})
	t.Run("deterministic", func(t *testing.T) {
		if _, err := Record(m, texts, chunks, out2, RecordOptions{SeqLen: 64, MaxSamples: 3, Seed: 11}); err != nil {
			t.Fatal(err)
		}
		files, _ := os.ReadDir(out1)
		if len(files) != c.NumLayers+2 {
			t.Errorf("%d files written, want %d", len(files), c.NumLayers+2)
		}
		for _, f := range files {
			a, _ := os.ReadFile(filepath.Join(out1, f.Name()))
			b, err := os.ReadFile(filepath.Join(out2, f.Name()))
			if err != nil || !bytes.Equal(a, b) {
				t.Errorf("%s differs between two runs (%v)", f.Name(), err)
			}
		}
		back, err := ReadSummary(out1)
		if err != nil || back.Tokens != total || len(back.Layers) != c.NumLayers {
			t.Errorf("ReadSummary: %v", err)
		}
	})
	var text bytes.Buffer
	s.WriteText(&text)
	if !strings.Contains(text.String(), "input absmax") || strings.Count(text.String(), "\n") < c.NumLayers+2 {
		t.Errorf("human summary:\n%s", text.String())
	}
}

func TestStatsOf(t *testing.T) {
	tests := []struct {
		module, prefix, file, err string
	}{
		{"model.layers.3.self_attn.q_k_v_proj", "model.layers.3.self_attn.q_k_v_proj.input", "layer_03.safetensors", ""},
		{"model.layers.3.self_attn.g_proj", "model.layers.3.self_attn.q_k_v_proj.input", "layer_03.safetensors", ""},
		{"model.layers.12.self_attn.o_proj", "model.layers.12.self_attn.o_proj.input", "layer_12.safetensors", ""},
		{"model.layers.0.mlp.up_proj", "model.layers.0.mlp.gate_proj.input", "layer_00.safetensors", ""},
		{"model.layers.0.mlp.down_proj", "model.layers.0.mlp.down_proj.input", "layer_00.safetensors", ""},
		{"lm_head", "lm_head.input", "head.safetensors", ""},
		{"model.layers.0.input_layernorm", "", "", "is not a linear"},
		{"model.embed_tokens", "", "", "is not model.layers"},
	}
	for _, tc := range tests {
		prefix, file, err := StatsOf(tc.module)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.module, err, tc.err)
			}
			continue
		}
		if err != nil || prefix != tc.prefix || file != tc.file {
			t.Errorf("%s: %q %q %v, want %q %q", tc.module, prefix, file, err, tc.prefix, tc.file)
		}
	}
}

func TestRangeOf(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	tests := []struct {
		data           []float32
		lo, hi, absmax float32
		bad            int64
	}{
		{[]float32{1, -3, 2}, -3, 2, 3, 0},
		{[]float32{0.5}, 0.5, 0.5, 0.5, 0},
		{[]float32{1, nan, -inf, 4}, 1, 4, 4, 2},
	}
	for k, tc := range tests {
		r := rangeOf(tc.data)
		if r.Min != tc.lo || r.Max != tc.hi || r.AbsMax != tc.absmax || r.bad != tc.bad {
			t.Errorf("case %d: %+v", k, r)
		}
	}
	big := make([]float32, 300000)
	big[123456], big[299999] = -7, 9
	if r := rangeOf(big); r.Min != -7 || r.Max != 9 {
		t.Errorf("parallel range %+v", r)
	}
	o := newObserver(0)
	o.Observe(0, forward.Q, []float32{1, nan}, 2)
	if _, err := o.rangeMap("layer 0"); err == nil || !strings.Contains(err.Error(), "layer 0: q holds 1 NaN/Inf") {
		t.Errorf("NaN activations: %v", err)
	}
	if _, err := Record(nil, nil, nil, t.TempDir(), RecordOptions{}); err == nil {
		t.Error("Run without chunks succeeded")
	}
}
