package forward

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"sparkconv/fixtures/fixturestest"
	"sparkconv/safetensors"
)

// extremeModel copies a golden model with every value of the named
// tensors set to bf16's largest finite value (0x7f7f, 3.39e38): finite
// weights whose products overflow float32.
func extremeModel(t *testing.T, golden string, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	fixturestest.Rewrite(t, filepath.Join(goldenDir, golden), dir, func(ts *safetensors.Tensor, b []byte) bool {
		for _, x := range names {
			if x == ts.Name {
				for i := 0; i+1 < len(b); i += 2 {
					b[i], b[i+1] = 0x7f, 0x7f
				}
			}
		}
		return true
	})
	return dir
}

// TestNonFiniteRefused: a forward that overflows (extreme but finite
// weights) fails naming the layer and the point where the first NaN or
// Inf appeared, in the prefill and in a decode step, never returning NaN
// logits.
func TestNonFiniteRefused(t *testing.T) {
	for _, c := range []struct {
		tensor string
		layer  int
		point  Point
		want   string
	}{
		{"model.layers.0.input_layernorm.weight", 0, AttnNorm, "layer 0: "},
		{"model.layers.1.post_attention_layernorm.weight", 1, MLPNorm, "layer 1: "},
		{"model.norm.weight", ModelLevel, FinalNorm, "the head: +Inf in final_norm"},
	} {
		t.Run(c.tensor, func(t *testing.T) {
			m, err := Open(extremeModel(t, goldens[0], c.tensor), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			r, err := m.Prefill([]int{1, 2, 3}, PrefillOptions{Logits: AllLogits})
			var nf *NonFiniteError
			if !errors.As(err, &nf) || nf.Layer != c.layer || nf.Point != c.point || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("prefill: result %v, error %v; want layer %d point %v (%q)", r != nil, err, c.layer, c.point, c.want)
			}
			d := m.NewDecoder(8, nil)
			if _, err := d.Step(1, false); !errors.As(err, &nf) || nf.Layer != c.layer {
				t.Errorf("decode step: %v, want a NonFiniteError of layer %d", err, c.layer)
			}
		})
	}
}

// BenchmarkCheckFinite: the forward's NaN/Inf scan of one stage output,
// in GB/s, for a cache-resident block (256 KiB) and a large one (16 MiB; a
// full-size layer at T = 512 scans about 9M values, 36 MB).
func BenchmarkCheckFinite(b *testing.B) {
	for _, n := range []int{1 << 16, 1 << 22} {
		b.Run(fmt.Sprintf("%dKiB", 4*n>>10), func(b *testing.B) {
			d := make([]float32, n)
			for i := range d {
				d[i] = float32(i%1000) * 1e-3
			}
			b.SetBytes(int64(4 * n))
			for b.Loop() {
				if err := checkFinite(0, MLPAct, d, 6656); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)*float64(4*n)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}

// TestCheckFiniteFindsFirst: the scan finds the first NaN, +Inf or -Inf
// at every offset (inside and after the eight-value blocks), reports its
// row and column, and passes the largest finite values.
func TestCheckFiniteFindsFirst(t *testing.T) {
	d := make([]float32, 37)
	for i := range d {
		d[i] = float32(i) - 18
	}
	d[3], d[20] = math.MaxFloat32, -math.MaxFloat32
	if err := checkFinite(2, MLPOut, d, 5); err != nil {
		t.Fatalf("finite values refused: %v", err)
	}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		for at := range d {
			old := d[at]
			d[at] = bad
			d[min(at+9, len(d)-1)] = float32(math.NaN()) // a later one is not reported
			var nf *NonFiniteError
			if err := checkFinite(2, MLPOut, d, 5); !errors.As(err, &nf) || nf.Row != at/5 || nf.Col != at%5 || nf.Layer != 2 {
				t.Fatalf("%v at %d: %v", bad, at, err)
			}
			d[at] = old
			d[min(at+9, len(d)-1)] = float32(min(at+9, len(d)-1)) - 18
		}
	}
}
