package rotate

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sparkconv/convert"
	"sparkconv/dtype"
	"sparkconv/eval"
	"sparkconv/fixtures/fixturestest"
	"sparkconv/forward"
	"sparkconv/quant"
	"sparkconv/safetensors"
)

// TestHadamard: every order the construction covers gives H·Hᵀ = n·I
// exactly, Spark's 2048 and SmolLM2's 576 among them; orders it does not
// cover give nil.
func TestHadamard(t *testing.T) {
	for _, c := range []struct {
		n    int
		name string
	}{{1, "sylvester-1"}, {2, "sylvester-2"}, {4, "sylvester-4"}, {12, "paley-12"}, {20, "paley-20"}, {24, "paley-24"},
		{48, "paley-48"}, {96, "sylvester-2 x paley-48"}, {128, "sylvester-128"}, {576, "sylvester-8 x paley-72"},
		{2048, "sylvester-2048"}, {36, ""}, {100, ""}} {
		h, name := Hadamard(c.n)
		if name != c.name || (h == nil) != (c.name == "") {
			t.Errorf("Hadamard(%d) = %q, want %q", c.n, name, c.name)
			continue
		}
		if h == nil {
			continue
		}
		n := c.n
		rows := n
		if n > 600 {
			rows = 8 // the first rows against every row: enough to catch a wrong construction, O(n²) each
		}
		for i := range rows {
			for j := range n {
				d := 0
				for k := range n {
					d += int(h[i*n+k]) * int(h[j*n+k])
				}
				if want := map[bool]int{true: n, false: 0}[i == j]; d != want {
					t.Fatalf("Hadamard(%d): row %d . row %d = %d, want %d", n, i, j, d, want)
				}
			}
		}
	}
}

// TestRotationOrthogonal: Q·Qᵀ = I to float32 rounding for both kinds,
// and a randomized Hadamard spreads a one-hot row flat (every |entry| is
// 1/√n): the attention sink's channel lands on all channels alike.
func TestRotationOrthogonal(t *testing.T) {
	for _, c := range []struct {
		n    int
		kind string
	}{{12, "randomized-hadamard"}, {36, "random-orthogonal"}, {128, "randomized-hadamard"}, {576, "randomized-hadamard"}} {
		r, err := New(c.n, 7)
		if err != nil || r.Kind != c.kind {
			t.Fatalf("New(%d): %v, %v; want %s", c.n, r, err, c.kind)
		}
		n, worst := c.n, 0.0
		for i := range n {
			for j := range n {
				d := 0.0
				for k := range n {
					d += float64(r.Q[i*n+k]) * float64(r.Q[j*n+k])
				}
				if i == j {
					d--
				}
				worst = max(worst, math.Abs(d))
			}
		}
		if worst > 2e-6 {
			t.Errorf("%s %d: |Q·Qᵀ - I| up to %.3g", c.kind, n, worst)
		}
		if c.kind == "randomized-hadamard" {
			flat := float32(1 / math.Sqrt(float64(n)))
			for i, v := range r.Q {
				if float32(math.Abs(float64(v))) != flat {
					t.Fatalf("%d: |Q[%d]| = %v, want %v", n, i, v, flat)
				}
			}
		}
	}
	a, _ := New(64, 1)
	b, _ := New(64, 2)
	same := true
	for i := range a.Q {
		same = same && a.Q[i] == b.Q[i]
	}
	if same {
		t.Error("seeds 1 and 2 give the same rotation")
	}
}

// logits runs the reference forward of the checkpoint in dir on ids.
func logits(t *testing.T, dir string, ids []int) []float32 {
	t.Helper()
	m, err := convert.OpenForward(dir, forward.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l, err := eval.Forward{M: m}.Logits(ids, 0)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestRotatedForward: the rotated checkpoint computes the network it came
// from. Written in float32, the logits agree to float32 rounding (measured
// 119 dB on the goldens, 116-117 on tiny, with down_proj smoothing too);
// written in the input's bf16, the second rounding of every weight costs
// what bf16 costs (measured 43.0 dB on the tied golden, 42.6 on tiny). The config unties the head and records the rotation.
func TestRotatedForward(t *testing.T) {
	ids := []int{1, 17, 300, 5, 77, 12, 401, 9, 250, 33, 61, 100, 7, 8}
	for _, c := range []struct {
		name, dir string
		dt        dtype.DType
		minDB     float64
		smooth    Smoothing
	}{
		{"golden-tied-f32", "../testdata/golden/spark-mini-tied", dtype.F32, 110, Smoothing{}},
		{"golden-untied-f32", "../testdata/golden/spark-mini-untied", dtype.F32, 110, Smoothing{}},
		{"tiny-f32", fixturestest.Tiny(t, false), dtype.F32, 110, Smoothing{}},
		{"golden-tied-bf16", "../testdata/golden/spark-mini-tied", "", 38, Smoothing{}},
		{"tiny-f32-smoothed", fixturestest.Tiny(t, false), dtype.F32, 110, Smoothing{Alpha: 0.3, Tokens: 512, SeqLen: 128}},
		{"tiny-bf16", fixturestest.Tiny(t, false), "", 38, Smoothing{}},
		{"tiny-f32-auto", fixturestest.Tiny(t, false), dtype.F32, 110, Smoothing{Auto: true, Tokens: 512, SeqLen: 128}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "rot")
			if _, err := Run(t.Context(), Options{Options: convert.Options{Model: c.dir, Out: out, Quiet: true}, Seed: 3, DType: c.dt, Smooth: c.smooth}); err != nil {
				t.Fatal(err)
			}
			want, got := logits(t, c.dir, ids), logits(t, out, ids)
			snr := quant.SNRdB(want, got)
			t.Logf("logits SNR %.1f dB", snr)
			if snr < c.minDB {
				t.Errorf("rotated logits SNR %.1f dB < %.0f", snr, c.minDB)
			}
			var cfg map[string]any
			b, err := os.ReadFile(filepath.Join(out, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &cfg); err != nil {
				t.Fatal(err)
			}
			rot, _ := cfg[ConfigKey].(map[string]any)
			if cfg["tie_word_embeddings"] != false || rot["seed"] != 3.0 || rot["kind"] == nil {
				t.Errorf("config: tie_word_embeddings %v, %s %v", cfg["tie_word_embeddings"], ConfigKey, rot)
			}
			sm, ok := rot["down_proj_smoothing"].(map[string]any)
			if ok != (c.smooth.Alpha > 0 || c.smooth.Auto) || (ok && sm["tokens"] != 512.0) {
				t.Errorf("config: down_proj_smoothing %v, asked for %+v", rot["down_proj_smoothing"], c.smooth)
			}
			if la, _ := sm["layer_alphas"].([]any); c.smooth.Auto && (sm["alpha"] != "auto" || len(la) != 4) {
				t.Errorf("config: down_proj_smoothing %v, want alpha auto and 4 layer alphas", sm)
			}
		})
	}
}

// TestSmoothScales: SmoothQuant's rule per channel, a dead channel (no
// input or no weight) keeping 1, the clamp at 1e-5.
func TestSmoothScales(t *testing.T) {
	// down [2 rows, 4 channels]; column maxima 2, 0, 4, 1e-30
	down := []float32{2, 0, -4, 1e-30, -1, 0, 3, 0}
	amax := []float64{8, 5, 0, 1e-30}
	got := smoothScales(amax, down, 0.5)
	want := []float32{2, 1, 1, float32(max(math.Sqrt(1e-30)/math.Sqrt(1e-30), 1e-5))}
	for j := range want {
		if math.Abs(float64(got[j]-want[j])) > 1e-6*float64(want[j]) {
			t.Errorf("s[%d] = %v, want %v", j, got[j], want[j])
		}
	}
	if s := smoothScales([]float64{1e-12}, []float32{1e6}, 0.5); s[0] != 1e-5 {
		t.Errorf("clamp: %v, want 1e-5", s[0])
	}
}

// TestRotateRefusesNaN: a weight holding NaN is refused by name, with and
// without the smoothing pass, and nothing is written.
func TestRotateRefusesNaN(t *testing.T) {
	src := t.TempDir()
	fixturestest.Rewrite(t, fixturestest.Tiny(t, false), src, func(ts *safetensors.Tensor, b []byte) bool {
		if ts.Name == "model.layers.1.mlp.up_proj.weight" {
			b[0], b[1] = 0xc0, 0x7f // bf16 NaN
		}
		return true
	})
	for _, sm := range []Smoothing{{}, {Alpha: 0.3, Tokens: 256, SeqLen: 64}} {
		out := filepath.Join(t.TempDir(), "rot")
		_, err := Run(t.Context(), Options{Options: convert.Options{Model: src, Out: out, Quiet: true}, Smooth: sm})
		if err == nil || !strings.Contains(err.Error(), `"model.layers.1.mlp.up_proj.weight" holds NaN`) {
			t.Errorf("smoothing %v: %v, want the NaN named", sm.Alpha, err)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("smoothing %v: %s written", sm.Alpha, out)
		}
	}
}

// TestOptionsCheck: Alpha outside [0, MaxSmoothAlpha] (NaN included) is
// refused by field name, by Check and by Run before anything is written;
// the range's ends and auto pass.
func TestOptionsCheck(t *testing.T) {
	for _, c := range []struct {
		sm   Smoothing
		want string // "" for accepted
	}{
		{Smoothing{}, ""},
		{Smoothing{Alpha: 0.3}, ""},
		{Smoothing{Alpha: MaxSmoothAlpha}, ""},
		{Smoothing{Auto: true}, ""},
		{Smoothing{Alpha: 1}, "rotate: Smooth.Alpha 1: want a number in [0, 0.99]"},
		{Smoothing{Alpha: -0.1}, "rotate: Smooth.Alpha -0.1: want a number in [0, 0.99]"},
		{Smoothing{Alpha: math.NaN()}, "rotate: Smooth.Alpha NaN: want a number in [0, 0.99]"},
		{Smoothing{Alpha: math.Inf(1), Auto: true}, "rotate: Smooth.Alpha +Inf: want a number in [0, 0.99]"},
	} {
		err := Options{Smooth: c.sm}.Check()
		if got := fmt.Sprint(err); (c.want == "" && err != nil) || (c.want != "" && got != c.want) {
			t.Errorf("Check(%+v) = %v, want %q", c.sm, err, c.want)
		}
		if c.want == "" {
			continue
		}
		out := filepath.Join(t.TempDir(), "rot")
		if _, err := Run(t.Context(), Options{Options: convert.Options{Model: "../testdata/golden/spark-mini-tied", Out: out, Quiet: true}, Smooth: c.sm}); fmt.Sprint(err) != c.want {
			t.Errorf("Run with %+v: %v, want %q", c.sm, err, c.want)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("Run with %+v: %s written", c.sm, out)
		}
	}
}
