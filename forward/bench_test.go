package forward

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"sparkconv/dtype"
	"sparkconv/kernels"
	"sparkconv/safetensors"
	"sparkconv/spark"
)

// shape is a synthetic model's size.
type shape struct {
	vocab, hidden, inter, layers, heads, kv, headDim, window int
	full                                                     bool // every layer full_attention
}

var (
	// one full-size layer (the real model's dimensions)
	fullLayer = shape{vocab: 512, hidden: 2048, inter: 6656, layers: 1, heads: 8, kv: 2, headDim: 256, window: 512}
	// package synthetic's "small" preset
	smallModel = shape{vocab: 2048, hidden: 512, inter: 1664, layers: 8, heads: 8, kv: 2, headDim: 64, window: 64}
)

// writeSynthetic writes a random bf16 Spark checkpoint of shape s into dir.
func writeSynthetic(tb testing.TB, dir string, s shape) {
	tb.Helper()
	types := make([]string, s.layers)
	for i := range types {
		types[i] = string(spark.Sliding)
		if s.full || i%4 == 3 {
			types[i] = string(spark.Full)
		}
	}
	cfg := map[string]any{
		"model_type": "spark2_5", "vocab_size": s.vocab, "hidden_size": s.hidden,
		"intermediate_size": s.inter, "num_hidden_layers": s.layers, "num_attention_heads": s.heads,
		"num_key_value_heads": s.kv, "head_dim": s.headDim, "hidden_act": "gelu", "rms_norm_eps": 1e-6,
		"tie_word_embeddings": true, "sliding_window": s.window, "layer_types": types,
		"rope_theta": 5e6, "partial_rotary_factor": 0.25, "sliding_rope_theta": 1e4,
	}
	js, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644); err != nil {
		tb.Fatal(err)
	}
	c, err := spark.ParseConfig(js)
	if err != nil {
		tb.Fatal(err)
	}
	var ts []safetensors.Tensor
	for k, spec := range c.Tensors() {
		ts = append(ts, safetensors.Tensor{Name: spec.Name, DType: dtype.BF16, Shape: spec.Shape, Produce: func() ([]byte, error) {
			return randomBF16(spec, uint64(k)), nil
		}})
	}
	if _, err := safetensors.WriteCheckpoint(dir, ts, safetensors.WriteOptions{}); err != nil {
		tb.Fatal(err)
	}
}

func randomBF16(spec spark.TensorSpec, seed uint64) []byte {
	n := 1
	for _, d := range spec.Shape {
		n *= int(d)
	}
	out := make([]byte, 2*n)
	const chunk = 1 << 16
	kernels.Parallel((n+chunk-1)/chunk, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			rng := rand.New(rand.NewPCG(seed, uint64(c)))
			for i := c * chunk; i < min(n, (c+1)*chunk); i++ {
				v := 0.02 * rng.NormFloat64()
				if spec.Kind == spark.KindNorm {
					v = 1 + 5*v
				}
				binary.LittleEndian.PutUint16(out[2*i:], dtype.F32ToBF16(float32(v)))
			}
		}
	})
	return out
}

func randomIDs(n, vocab int) []int {
	rng := rand.New(rand.NewPCG(1, 2))
	ids := make([]int, n)
	for i := range ids {
		ids[i] = rng.IntN(vocab)
	}
	return ids
}

// cpuTime is the process's user+system CPU time: on a shared machine
// "per CPU-second" rates are steadier than wall-clock ones.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// report adds tokens/s and GFLOP/s (wall) and GFLOP per CPU-second.
func report(b *testing.B, tokens, flops float64, cpu time.Duration) {
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(tokens/sec, "tokens/s")
	b.ReportMetric(flops/sec/1e9, "GFLOP/s")
	b.ReportMetric(flops*float64(b.N)/cpu.Seconds()/1e9, "GFLOP/CPU-s")
}

// weightForms are the two ways the benchmarks hold a bf16 checkpoint's
// linears: multiplied in place (what the forward does) or as float32
// copies (what Model.Layer hands out, and the forward before bf16 kernels).
var weightForms = []string{"bf16", "f32"}

// loadForm loads layer 0 of m in the given weight form, outside the timing.
func loadForm(b *testing.B, m *Model, form string) {
	var err error
	if form == "f32" {
		_, err = m.Layer(0)
	} else {
		_, err = m.layer(0)
	}
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkLayerPrefill is one full-size layer (hidden 2048, intermediate
// 6656, heads 8/2 x 256) over a 512-token prefill, with the weights in
// bf16 (in place) and as float32 copies. scripts/torch-layer-anchor.py
// runs the same layer in PyTorch.
func BenchmarkLayerPrefill(b *testing.B) {
	fullLayers(b, func(lt, dir string, vocab int) {
		for _, form := range weightForms {
			b.Run(lt+"/"+form, func(b *testing.B) {
				benchLayer(b, dir, vocab, form, Options{})
			})
		}
	})
}

// fullLayers writes a one-layer full-size model of each layer type
// (sliding, full) and calls f with its folder.
func fullLayers(b *testing.B, f func(lt, dir string, vocab int)) {
	for _, lt := range []string{"sliding", "full"} {
		s := fullLayer
		s.full = lt == "full"
		dir := b.TempDir()
		writeSynthetic(b, dir, s)
		f(lt, dir, s.vocab)
	}
}

// benchLayer times layer 0 of the model in dir (weights in the given
// form) over a 512-token prefill; it returns the CPU time of the loop.
func benchLayer(b *testing.B, dir string, vocab int, form string, opt Options) time.Duration {
	m, err := Open(dir, opt)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	const T = 512
	x0, err := m.Embed(randomIDs(T, vocab))
	if err != nil {
		b.Fatal(err)
	}
	x := make([]float32, len(x0))
	loadForm(b, m, form)
	copy(x, x0) // one untimed pass: page faults, scratch buffers
	if _, _, err := m.ForwardLayer(0, x, T, nil); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	for b.Loop() {
		copy(x, x0)
		if _, _, err := m.ForwardLayer(0, x, T, nil); err != nil {
			b.Fatal(err)
		}
	}
	cpu := cpuTime() - cpu0
	report(b, T, LayerFLOPs(m.Cfg, 0, T), cpu)
	return cpu
}

// BenchmarkCalibrationLayer is one full-size layer of GPTQ's calibration
// forward over a 512-token chunk: float32 weights (the calibration's
// dequantized codes) and the linears through the kernel family's
// products (Options.FamilyLinears: bf16 dot products under
// SPARKCONV_KERNELS=avx512bf16, float32 otherwise).
func BenchmarkCalibrationLayer(b *testing.B) {
	fullLayers(b, func(lt, dir string, vocab int) {
		b.Run(lt+"/"+kernels.Family(), func(b *testing.B) {
			cpu := benchLayer(b, dir, vocab, "f32", Options{FamilyLinears: true})
			b.ReportMetric(512*float64(b.N)/cpu.Seconds(), "tokens/CPU-s")
		})
	})
}

// BenchmarkPrefillSmall is a whole-model 256-token prefill (all logits) of
// the fixtures "small" shape (8 layers, hidden 512, vocab 2048).
func BenchmarkPrefillSmall(b *testing.B) {
	dir := b.TempDir()
	writeSynthetic(b, dir, smallModel)
	m, err := Open(dir, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	const T = 256
	ids := randomIDs(T, smallModel.vocab)
	if _, err := m.Prefill(ids, PrefillOptions{}); err != nil { // widen weights once
		b.Fatal(err)
	}
	flops := 2.0 * T * float64(m.Cfg.VocabSize*m.Cfg.HiddenSize)
	for i := range m.Cfg.NumLayers {
		flops += LayerFLOPs(m.Cfg, i, T)
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := m.Prefill(ids, PrefillOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	report(b, T, flops, cpuTime()-cpu0)
}

// BenchmarkDecodeLayer is one full-size sliding layer's decode step against
// a full 511-slot ring cache: memory bound, 103 MB of bf16 weights in place
// or 206 MB of float32 copies. GB/s counts the weight bytes read.
func BenchmarkDecodeLayer(b *testing.B) {
	dir := b.TempDir()
	writeSynthetic(b, dir, fullLayer)
	for _, form := range weightForms {
		b.Run(form, func(b *testing.B) {
			m, err := Open(dir, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			lc := m.NewLayerCache(0, Ring, 1024)
			for s := range lc.Filled {
				lc.Filled[s] = true
			}
			x := make([]float32, m.Cfg.HiddenSize)
			if err := m.EmbedRow(x, 3); err != nil {
				b.Fatal(err)
			}
			loadForm(b, m, form)
			bytes := layerParams(m.Cfg) * 4
			if form == "bf16" {
				bytes /= 2
			}
			b.ResetTimer()
			cpu0 := cpuTime()
			for b.Loop() {
				if _, _, _, err := m.DecodeLayer(0, x, 600, lc); err != nil {
					b.Fatal(err)
				}
			}
			sec := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(1/sec, "tokens/s")
			b.ReportMetric(float64(bytes)/sec/1e9, "GB/s")
			b.ReportMetric(float64(b.N)/(cpuTime()-cpu0).Seconds(), "tokens/CPU-s")
		})
	}
}

func ExampleModel_DecodeLayer() {
	m, err := Open("../testdata/golden/spark-mini-tied", Options{})
	if err != nil {
		panic(err)
	}
	defer m.Close()
	// layer 0 is a sliding layer: a ring cache of window-1 = 7 slots
	cache := m.NewLayerCache(0, Ring, 1024)
	x := make([]float32, m.Cfg.HiddenSize)
	for pos, id := range []int{493, 113, 443} {
		if err := m.EmbedRow(x, id); err != nil {
			panic(err)
		}
		_, k, v, err := m.DecodeLayer(0, x, pos, cache)
		if err != nil {
			panic(err)
		}
		cache.Update(pos, k, v)
	}
	fmt.Println(cache.Slots, cache.Filled, cache.Mask(-1e4)[:4])
	// Output: 7 [true true true false false false false] [0 0 0 -10000]
}
