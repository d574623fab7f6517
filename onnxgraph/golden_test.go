package onnxgraph_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"testing"

	. "sparkconv/onnxgraph"
	"sparkconv/ortrun"
	"sparkconv/ortrun/orttest"
	"sparkconv/quant"
	"sparkconv/safetensors"
	"sparkconv/spark"
)

const goldenDir = "../testdata/golden"

// golden holds a golden set's expected tensors.
type golden struct {
	dir    string
	cfg    *spark.Config
	ids    []int64
	tensor map[string][]float32
}

func loadGolden(t testing.TB, name string) *golden {
	t.Helper()
	dir := filepath.Join(goldenDir, name)
	f, err := safetensors.OpenFile(filepath.Join(dir, "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := spark.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	g := &golden{dir: dir, cfg: cfg, tensor: map[string][]float32{}}
	for _, ti := range f.Header.Tensors {
		if ti.Name == "input_ids" {
			_, raw, _ := f.Raw(ti.Name)
			for i := 0; i < len(raw); i += 8 {
				var v int64
				for k := 7; k >= 0; k-- {
					v = v<<8 | int64(raw[i+k])
				}
				g.ids = append(g.ids, v)
			}
			continue
		}
		_, v, err := f.Float32(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		g.tensor[ti.Name] = v
	}
	return g
}

// row returns position p of a [T, ...] golden tensor.
func (g *golden) row(name string, p int) []float32 {
	v := g.tensor[name]
	n := len(v) / len(g.ids)
	return v[p*n : (p+1)*n]
}

func export(t testing.TB, model string, o ExportOptions) string {
	t.Helper()
	m, err := spark.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	dir := t.TempDir()
	if _, err := Export(context.Background(), m, dir, o); err != nil {
		t.Fatal(err)
	}
	return dir
}

// goldenRun is the comparison of an export, step by step, with a golden set.
type goldenRun struct {
	stats      map[string]*quant.ErrStats
	maxRef     map[string]float64
	top1, top5 int // positions where ORT's top-1 / top-5 set equals the reference
	positions  int
	hidden     map[int][][]float32 // per position: residual entering each layer
}

func runGolden(t testing.TB, g *golden, dir string, optimize string) *goldenRun {
	t.Helper()
	r, err := ortrun.OpenRunner(dir, ortrun.RunnerOptions{SessionOptions: ortrun.SessionOptions{Threads: 1, Optimize: optimize}, KeyGarbage: 50, ValueGarbage: 1000, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	res := &goldenRun{stats: map[string]*quant.ErrStats{}, maxRef: map[string]float64{}, hidden: map[int][][]float32{}}
	add := func(name string, ref, got []float32) {
		s := res.stats[name]
		if s == nil {
			s = &quant.ErrStats{}
			res.stats[name] = s
		}
		s.Merge(quant.Compare(ref, got))
		for _, v := range ref {
			res.maxRef[name] = math.Max(res.maxRef[name], math.Abs(float64(v)))
		}
	}
	for p, id := range g.ids {
		tr, err := r.Step(id, p)
		if err != nil {
			t.Fatalf("position %d: %v", p, err)
		}
		for i, h := range tr.HiddenIn {
			add(fmt.Sprintf("hidden_in.%d", i), g.row(fmt.Sprintf("hidden_in.%d", i), p), h)
		}
		for i := range tr.Key {
			add(fmt.Sprintf("key.%d", i), g.row(fmt.Sprintf("key.%d", i), p), tr.Key[i])
			add(fmt.Sprintf("value.%d", i), g.row(fmt.Sprintf("value.%d", i), p), tr.Value[i])
		}
		add("hidden_out", g.row("hidden_out", p), tr.HiddenOut)
		ref := g.row("logits", p)
		add("logits", ref, tr.Logits)
		res.positions++
		if topK(ref, 1)[0] == topK(tr.Logits, 1)[0] {
			res.top1++
		}
		if fmt.Sprint(topK(ref, 5)) == fmt.Sprint(topK(tr.Logits, 5)) {
			res.top5++
		}
		res.hidden[p] = nil
		for i := range g.cfg.NumLayers {
			res.hidden[p] = append(res.hidden[p], tr.HiddenIn[i])
		}
	}
	return res
}

// topK returns the indices of the k largest values, largest first.
func topK(v []float32, k int) []int {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return v[idx[a]] > v[idx[b]] })
	return idx[:k]
}

// minSNR returns the lowest SNR over the compared tensors and its name.
func (res *goldenRun) minSNR() (float64, string) {
	best, name := math.Inf(1), ""
	for n, s := range res.stats {
		if v := s.SNRdB(); v < best {
			best, name = v, n
		}
	}
	return best, name
}

func TestGoldenFloat32(t *testing.T) {
	orttest.Init(t)
	cases := []struct {
		model string
		o     ExportOptions
	}{
		{"spark-mini-tied", ExportOptions{Layout: LayoutAuto, Context: 48}},
		{"spark-mini-tied", ExportOptions{Layout: LayoutRing, Context: 41}},
		{"spark-mini-tied", ExportOptions{Layout: LayoutRoll, Context: 64, Granularity: "block"}},
		{"spark-mini-untied", ExportOptions{Layout: LayoutAuto, Context: 48}},
		{"spark-mini-untied", ExportOptions{Layout: LayoutRing, Context: 48, Granularity: "block"}},
	}
	for _, c := range cases {
		name := fmt.Sprintf("%s/%s/%s/ctx%d", c.model, c.o.Layout, c.o.Granularity, c.o.Context)
		t.Run(name, func(t *testing.T) {
			g := loadGolden(t, c.model)
			res := runGolden(t, g, export(t, g.dir, c.o), "")
			wantTensors := 2*g.cfg.NumLayers + 2 // key.i, value.i, hidden_out, logits
			if c.o.Granularity == "block" {
				wantTensors += (g.cfg.NumLayers + 3) / 4
			} else {
				wantTensors += g.cfg.NumLayers
			}
			if len(res.stats) != wantTensors {
				t.Fatalf("compared %d tensors, want %d", len(res.stats), wantTensors)
			}
			for n, s := range res.stats {
				if s.SNRdB() < 100 {
					t.Errorf("%s: SNR %.1f dB < 100", n, s.SNRdB())
				}
				if s.MaxAbs > 1e-4*res.maxRef[n] {
					t.Errorf("%s: max|diff| %.3g > 1e-4 x max|ref| %.3g", n, s.MaxAbs, res.maxRef[n])
				}
			}
			if res.top1 != res.positions {
				t.Errorf("top-1 agrees at %d of %d positions", res.top1, res.positions)
			}
			snr, at := res.minSNR()
			t.Logf("min SNR %.1f dB (%s), top-1 %d/%d, top-5 %d/%d", snr, at, res.top1, res.positions, res.top5, res.positions)
		})
	}
}

// TestGoldenFloat16 runs the float16 export against the float64 golden
// values: about 11 significant bits everywhere, so a lower bar.
func TestGoldenFloat16(t *testing.T) {
	orttest.Init(t)
	for _, layout := range []string{LayoutRing, LayoutRoll, LayoutAuto} {
		t.Run(layout, func(t *testing.T) {
			g := loadGolden(t, "spark-mini-tied")
			res := runGolden(t, g, export(t, g.dir, ExportOptions{Layout: layout, Context: 48, DType: Float16}), "extended")
			snr, at := res.minSNR()
			t.Logf("min SNR %.1f dB (%s), logits %.1f dB, top-1 %d/%d, top-5 %d/%d", snr, at, res.stats["logits"].SNRdB(), res.top1, res.positions, res.top5, res.positions)
			// Measured 63.7 dB min over all 26 tensors and 40 positions
			// (errors compound over 8 layers); about 5 dB margin.
			if snr < 58 {
				t.Errorf("min SNR %.1f dB (%s) < 58 dB", snr, at)
			}
			if res.top1 != res.positions {
				t.Errorf("top-1 agrees at %d of %d positions", res.top1, res.positions)
			}
		})
	}
}

// TestGoldenCatchesTanhGELU: the bars are tight enough to see the tanh
// approximation (testdata/golden/spark-mini-tied/README.md: 82.7 dB) on a
// model trained with exact GELU.
func TestGoldenCatchesTanhGELU(t *testing.T) {
	orttest.Init(t)
	g := loadGolden(t, "spark-mini-tied")
	res := runGolden(t, g, export(t, g.dir, ExportOptions{Context: 48, GELU: "tanh"}), "")
	snr, at := res.minSNR()
	if snr >= 100 || snr < 60 {
		t.Fatalf("tanh GELU gives min SNR %.1f dB (%s); want 60..100 (the golden README: 82.7)", snr, at)
	}
	t.Logf("tanh GELU: min SNR %.1f dB (%s)", snr, at)
}

// TestORTFloat16RMSNormFusion pins why float16 runs use optimization level
// "extended": at "all", ONNX Runtime 1.30 fuses the float16 RMSNorm pattern
// into SimplifiedLayerNormalization with epsilon 1e-5 instead of the
// graph's 1e-6 (testdata/golden/spark-mini-tied/README.md lists that bug
// at 38.4 dB).
func TestORTFloat16RMSNormFusion(t *testing.T) {
	orttest.Init(t)
	g := loadGolden(t, "spark-mini-tied")
	dir := export(t, g.dir, ExportOptions{Context: 48, DType: Float16})
	all := runGolden(t, g, dir, "all")
	ext := runGolden(t, g, dir, "extended")
	a, _ := all.minSNR()
	e, _ := ext.minSNR()
	t.Logf("float16 export vs float64 golden: ORT level all %.1f dB, extended %.1f dB", a, e)
	if !(a < 45 && e > 58) {
		t.Fatalf("expected the fused-epsilon loss at level all (< 45 dB) and none at extended (> 58 dB); got %.1f / %.1f -- has ONNX Runtime changed?", a, e)
	}
}

// TestRingEqualsRoll: on one token history the ring and roll layouts give
// the same hidden states and logits (softmax ignores key order; only float
// summation order differs).
func TestRingEqualsRoll(t *testing.T) {
	orttest.Init(t)
	g := loadGolden(t, "spark-mini-tied")
	ring := runGolden(t, g, export(t, g.dir, ExportOptions{Layout: LayoutRing, Context: 48}), "")
	roll := runGolden(t, g, export(t, g.dir, ExportOptions{Layout: LayoutRoll, Context: 48}), "")
	worst := math.Inf(1)
	for p := range g.ids {
		for i := range g.cfg.NumLayers {
			a, b := ring.hidden[p][i], roll.hidden[p][i]
			s := quant.SNRdB(a, b)
			worst = math.Min(worst, s)
			if s < 115 {
				t.Errorf("position %d layer %d: ring vs roll hidden state %.1f dB", p, i, s)
			}
		}
	}
	t.Logf("ring vs roll: lowest hidden-state SNR %.1f dB over %d positions x %d layers", worst, len(g.ids), g.cfg.NumLayers)
}
