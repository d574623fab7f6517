package calib

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"sparkconv/forward"
	"sparkconv/safetensors"
	"sparkconv/spark"
	"sparkconv/synthetic"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCalibrateLayer is the per-chunk work of calibrating one
// full-size layer (hidden 2048, intermediate 6656, heads 8/2 x 256) on a
// 512-token chunk: the forward with every point observed (ranges,
// per-channel statistics) and the four Hessian updates (3 x 2048^2 +
// 6656^2). GFLOP counts the forward and half of each X^T X.
func BenchmarkCalibrateLayer(b *testing.B) {
	dir := b.TempDir()
	cfg := map[string]any{
		"model_type": "spark2_5", "vocab_size": 512, "hidden_size": 2048, "intermediate_size": 6656,
		"num_hidden_layers": 1, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256,
		"hidden_act": "gelu", "rms_norm_eps": 1e-6, "tie_word_embeddings": true, "sliding_window": 512,
		"layer_types": []string{"sliding_attention"}, "rope_theta": 5e6, "partial_rotary_factor": 0.25, "sliding_rope_theta": 1e4,
	}
	js, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, spark.ConfigFile), js, 0o644); err != nil {
		b.Fatal(err)
	}
	c, err := spark.ParseConfig(js)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := safetensors.WriteCheckpoint(dir, synthetic.Tensors(c, 1), safetensors.WriteOptions{}); err != nil {
		b.Fatal(err)
	}
	m, err := forward.Open(dir, forward.Options{CachedLayers: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	const T = 512
	rng := rand.New(rand.NewPCG(1, 1))
	ids := make([]int, T)
	for i := range ids {
		ids[i] = rng.IntN(512)
	}
	x0, err := m.Embed(ids)
	if err != nil {
		b.Fatal(err)
	}
	obs := newObserver(0)
	for _, in := range forward.LinearInputs {
		n := map[forward.Point]int{forward.AttnNorm: 2048, forward.AttnGated: 2048, forward.MLPNorm: 2048, forward.MLPAct: 6656}[in.Point]
		obs.inputs[in.Point] = newInputAcc(n)
	}
	hessFLOPs := 0.0
	for _, n := range []int{2048, 2048, 2048, 6656} {
		hessFLOPs += float64(T) * float64(n) * float64(n) // half of X^T X, 2 flops a product
	}
	flops := forward.LayerFLOPs(c, 0, T) + hessFLOPs
	x := make([]float32, len(x0))
	if _, err := m.Layer(0); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	for b.Loop() {
		copy(x, x0)
		if _, _, err := m.ForwardLayer(0, x, T, obs); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(T/sec, "tokens/s")
	b.ReportMetric(flops/sec/1e9, "GFLOP/s")
	b.ReportMetric(flops*float64(b.N)/(cpuTime()-cpu0).Seconds()/1e9, "GFLOP/CPU-s")
}
