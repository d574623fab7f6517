package forward

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"sparkconv/safetensors"
)

const goldenDir = "../testdata/golden/"

var goldens = []string{"spark-mini-tied", "spark-mini-untied"}

// golden is one golden set: the model and the float64 reference results.
type golden struct {
	name string
	m    *Model
	ids  []int
	ref  map[string][]float32
}

func loadGolden(t testing.TB, name string, opt Options) *golden {
	t.Helper()
	dir := filepath.Join(goldenDir, name)
	m, err := Open(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	f, err := safetensors.OpenFile(filepath.Join(dir, "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g := &golden{name: name, m: m, ref: map[string][]float32{}}
	for _, ti := range f.Header.Tensors {
		if ti.Name == "input_ids" {
			_, raw, err := f.Raw(ti.Name)
			if err != nil {
				t.Fatal(err)
			}
			for k := 0; k < len(raw); k += 8 {
				g.ids = append(g.ids, int(int64(binary.LittleEndian.Uint64(raw[k:]))))
			}
			continue
		}
		_, v, err := f.Float32(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		g.ref[ti.Name] = v
	}
	return g
}

// group is the tensor group of a golden name: "key.3" -> "key.*".
func group(name string) string {
	if base, _, ok := strings.Cut(name, "."); ok {
		return base + ".*"
	}
	return name
}

// checkAgainst compares got (by golden name) with g.ref at the bars of the
// golden README and logs the worst SNR per tensor group.
func checkAgainst(t *testing.T, g *golden, got map[string][]float32, what string) {
	t.Helper()
	worst := map[string]Diff{}
	var names []string
	for name := range got {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		ref, ok := g.ref[name]
		if !ok {
			t.Errorf("%s: %s: no such golden tensor", what, name)
			continue
		}
		if len(got[name]) != len(ref) {
			t.Errorf("%s: %s: %d values, golden has %d", what, name, len(got[name]), len(ref))
			continue
		}
		d := Compare(ref, got[name])
		if d.SNR < 100 || d.MaxAbsDiff > 1e-4*d.MaxAbsRef {
			t.Errorf("%s: %s: %v; want SNR >= 100 dB and max|diff| <= 1e-4 max|ref|", what, name, d)
		}
		gr := group(name)
		if w, ok := worst[gr]; !ok || d.SNR < w.SNR {
			worst[gr] = d
		}
	}
	var groups []string
	for gr := range worst {
		groups = append(groups, gr)
	}
	sort.Strings(groups)
	for _, gr := range groups {
		t.Logf("%s %s %-12s min %v", g.name, what, gr, worst[gr])
	}
	if len(got["logits"]) > 0 {
		V := g.m.Cfg.VocabSize
		for p := range len(g.ids) {
			ref, out := g.ref["logits"][p*V:(p+1)*V], got["logits"][p*V:(p+1)*V]
			if a, b := ArgMax(ref), ArgMax(out); a != b {
				t.Errorf("%s: position %d: top-1 %d, golden %d", what, p, b, a)
			}
		}
	}
}

func TestPrefillGolden(t *testing.T) {
	for _, name := range goldens {
		for _, opt := range []Options{{}, {CachedLayers: 1, HeadBlockRows: 100}} {
			t.Run(fmt.Sprintf("%s/cached%d", name, opt.CachedLayers), func(t *testing.T) {
				g := loadGolden(t, name, opt)
				r, err := g.m.Prefill(g.ids, PrefillOptions{Dump: true})
				if err != nil {
					t.Fatal(err)
				}
				got := map[string][]float32{}
				for _, ts := range r.Tensors(g.m, g.ids) {
					if ts.Name == "input_ids" {
						continue
					}
					b, err := ts.Produce()
					if err != nil {
						t.Fatal(err)
					}
					got[ts.Name] = f32s(b)
				}
				if len(got) != len(g.ref) {
					t.Errorf("Tensors gave %d float tensors, golden has %d", len(got), len(g.ref))
				}
				checkAgainst(t, g, got, "prefill")
			})
		}
	}
}

func f32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for k := range out {
		out[k] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*k:]))
	}
	return out
}

func TestPrefillLastLogits(t *testing.T) {
	g := loadGolden(t, goldens[0], Options{})
	r, err := g.m.Prefill(g.ids, PrefillOptions{Logits: LastLogits})
	if err != nil {
		t.Fatal(err)
	}
	V := g.m.Cfg.VocabSize
	ref := g.ref["logits"][(len(g.ids)-1)*V:]
	if d := Compare(ref, r.Logits); d.SNR < 100 {
		t.Errorf("last-position logits: %v", d)
	}
	if r.HiddenIn != nil || r.HiddenOut != nil {
		t.Errorf("without Dump the result kept %d layer inputs", len(r.HiddenIn))
	}
}

// fillGarbage writes values that would poison any computation that read
// them into every slot of every cache: huge numbers and NaNs.
func fillGarbage(d *Decoder, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, lc := range d.Caches {
		for k := range lc.Key {
			lc.Key[k] = float32(rng.NormFloat64() * 1e4)
			lc.Value[k] = float32(rng.NormFloat64() * 1e4)
			if rng.IntN(50) == 0 {
				lc.Key[k], lc.Value[k] = float32(math.NaN()), float32(math.Inf(1))
			}
		}
	}
}

func TestDecodeGolden(t *testing.T) {
	layouts := map[string]func(int) Layout{
		"auto": nil,
		"ring": func(int) Layout { return Ring },
		"roll": func(int) Layout { return Roll },
	}
	for _, name := range goldens {
		for lname, lay := range layouts {
			t.Run(name+"/"+lname, func(t *testing.T) {
				g := loadGolden(t, name, Options{})
				c := g.m.Cfg
				T := len(g.ids)
				d := g.m.NewDecoder(T, lay)
				fillGarbage(d, 7)
				got := map[string][]float32{}
				for _, id := range g.ids {
					r, err := d.Step(id, true)
					if err != nil {
						t.Fatal(err)
					}
					got["logits"] = append(got["logits"], r.Logits...)
					got["hidden_out"] = append(got["hidden_out"], r.HiddenOut...)
					got["final_norm"] = append(got["final_norm"], r.FinalNorm...)
					for i := range c.NumLayers {
						s := strconv.Itoa(i)
						got["hidden_in."+s] = append(got["hidden_in."+s], r.HiddenIn[i]...)
						got["key."+s] = append(got["key."+s], r.Key[i]...)
						got["value."+s] = append(got["value."+s], r.Value[i]...)
					}
				}
				checkAgainst(t, g, got, "decode-"+lname)
				if _, err := d.Step(g.ids[0], false); err == nil {
					t.Errorf("step past the context of %d succeeded", T)
				}
			})
		}
	}
}

func TestCacheUpdate(t *testing.T) {
	tests := []struct {
		layout     Layout
		positions  int
		wantFilled string
		wantKey0   []float32 // key[g=0, d=0, :] after the updates
	}{
		{Ring, 2, "110", []float32{1, 2, 0}},
		{Ring, 5, "111", []float32{4, 5, 3}},
		{Roll, 2, "011", []float32{0, 1, 2}},
		{Roll, 5, "111", []float32{3, 4, 5}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%v%d", tc.layout, tc.positions), func(t *testing.T) {
			lc := NewLayerCache(tc.layout, 2, 2, 3)
			for p := range tc.positions {
				v := float32(p + 1)
				lc.Update(p, []float32{v, -v, 10 * v, -10 * v}, []float32{v, v, v, v})
			}
			filled := ""
			for _, f := range lc.Filled {
				filled += map[bool]string{true: "1", false: "0"}[f]
			}
			if filled != tc.wantFilled {
				t.Errorf("filled %s, want %s", filled, tc.wantFilled)
			}
			for s, w := range tc.wantKey0 {
				// key [KV=2, D=2, C=3]: (g=0,d=0) row, (g=1,d=0) = 10x
				if lc.Key[s] != w || lc.Key[2*3+s] != 10*w || lc.Value[s*2] != w || lc.Value[(3+s)*2] != w {
					t.Errorf("slot %d: key %v value %v, want %v", s, lc.Key, lc.Value, tc.wantKey0)
					break
				}
			}
			mask := lc.Mask(-1e4)
			for s, f := range lc.Filled {
				if (mask[s] == 0) != f {
					t.Errorf("mask %v for filled %v", mask, lc.Filled)
				}
			}
			if mask[3] != 0 {
				t.Errorf("mask for the new token %g, want 0", mask[3])
			}
		})
	}
}

func TestRoPE(t *testing.T) {
	g := loadGolden(t, goldens[0], Options{})
	c := g.m.Cfg
	for _, layer := range []int{0, 3} {
		R := c.RotaryDims(layer)
		theta := c.RoPEFor(layer).Theta
		for _, pos := range []int{0, 1, 39, 1 << 20} {
			cos, sin := g.m.RoPE(layer, pos)
			if len(cos) != R/2 || len(sin) != R/2 {
				t.Fatalf("layer %d: %d/%d values, want R/2 = %d", layer, len(cos), len(sin), R/2)
			}
			j := R/2 - 1
			a := float64(pos) / math.Pow(theta, float64(2*j)/float64(R))
			if math.Abs(float64(cos[j])-math.Cos(a)) > 1e-7 || math.Abs(float64(sin[j])-math.Sin(a)) > 1e-7 {
				t.Errorf("layer %d pos %d j %d: cos %g sin %g, want %g %g", layer, pos, j, cos[j], sin[j], math.Cos(a), math.Sin(a))
			}
		}
	}
	// the prefill tables grow only to the positions used
	if _, err := g.m.Prefill(g.ids[:5], PrefillOptions{Logits: NoLogits}); err != nil {
		t.Fatal(err)
	}
	for k, tab := range g.m.ropeCache {
		if tab.rows() != 5 {
			t.Errorf("rope table %v has %d rows after a 5-token prefill", k, tab.rows())
		}
	}
}

func TestErrors(t *testing.T) {
	g := loadGolden(t, goldens[0], Options{})
	tests := []struct {
		name string
		run  func() error
		want string
	}{
		{"empty", func() error { _, err := g.m.Prefill(nil, PrefillOptions{}); return err }, "no tokens"},
		{"id range", func() error { _, err := g.m.Prefill([]int{1, 512}, PrefillOptions{}); return err }, "position 1: token id 512 out of range"},
		{"negative id", func() error { _, err := g.m.Prefill([]int{-1}, PrefillOptions{}); return err }, "token id -1"},
		{"layer range", func() error { _, err := g.m.Layer(8); return err }, "layer 8 out of range"},
		{"hidden size", func() error { _, _, err := g.m.ForwardLayer(0, make([]float32, 10), 1, nil); return err }, "want T*H"},
		{"cache shape", func() error {
			_, _, _, err := g.m.DecodeLayer(0, make([]float32, 128), 0, NewLayerCache(Ring, 2, 16, 7))
			return err
		}, "cache is 2 kv heads x 16 dims"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// recorder keeps every observed tensor by layer and point.
type recorder map[string][]float32

func (r recorder) Observe(layer int, p Point, data []float32, cols int) {
	if len(data)%cols != 0 {
		panic(fmt.Sprintf("%v: %d values, %d cols", p, len(data), cols))
	}
	k := fmt.Sprintf("%d.%v", layer, p)
	r[k] = append(r[k], data...)
}

func TestObserver(t *testing.T) {
	g := loadGolden(t, goldens[0], Options{})
	c := g.m.Cfg
	rec := recorder{}
	r, err := g.m.Prefill(g.ids, PrefillOptions{Dump: true, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	T, W := len(g.ids), c.SlidingWindow
	// a sliding layer's query at p sees min(p+1, W) keys, a full one p+1
	slidingKeys, fullKeys := 0, 0
	for p := range T {
		slidingKeys += min(p+1, W)
		fullKeys += p + 1
	}
	for i := range c.NumLayers {
		s := strconv.Itoa(i)
		for _, p := range LayerPoints() {
			if _, ok := rec[s+"."+p.String()]; !ok {
				t.Errorf("layer %d: point %v never observed", i, p)
			}
		}
		want := fullKeys
		if c.IsSliding(i) {
			want = slidingKeys
		}
		if n := len(rec[s+".probs"]); n != want*c.NumHeads {
			t.Errorf("layer %d: %d probabilities, want %d", i, n, want*c.NumHeads)
		}
		var sum float64
		for _, v := range rec[s+".probs"] {
			sum += float64(v)
		}
		if math.Abs(sum-float64(T*c.NumHeads)) > 1e-3 {
			t.Errorf("layer %d: probabilities sum to %g, want %d (one per query and head)", i, sum, T*c.NumHeads)
		}
		if d := Compare(r.HiddenIn[i], rec[s+".hidden_in"]); d.MaxAbsDiff != 0 {
			t.Errorf("layer %d: observed hidden_in differs from the dump: %v", i, d)
		}
		if d := Compare(r.Key[i], rec[s+".k_rope"]); d.MaxAbsDiff != 0 {
			t.Errorf("layer %d: observed k_rope differs from the key dump: %v", i, d)
		}
	}
	if d := Compare(r.FinalNorm, rec["-1.final_norm"]); d.MaxAbsDiff != 0 {
		t.Errorf("final norm observed %v", d)
	}
	if n := len(rec["-1.logits"]); n != T*c.VocabSize {
		t.Errorf("%d logits observed, want %d", n, T*c.VocabSize)
	}
}

func TestLayerFLOPs(t *testing.T) {
	g := loadGolden(t, goldens[0], Options{})
	c := g.m.Cfg
	// hidden 128, q 256, kv 2x64, heads 8, intermediate 192; T = 10, window 8
	lin := 2.0 * 10 * (128*384 + 128*8 + 256*128 + 3*128*192)
	full := lin + 4*55*256          // 1+2+...+10 keys
	sliding := lin + 4*(36+8+8)*256 // 1..8, then 8, 8
	if got := LayerFLOPs(c, 3, 10); got != full {
		t.Errorf("full layer: %g, want %g", got, full)
	}
	if got := LayerFLOPs(c, 0, 10); got != sliding {
		t.Errorf("sliding layer: %g, want %g", got, sliding)
	}
}

// TestDecodeLayerAfterPrefill is the ONNX verifier's path: caches filled
// from a prefill of positions 0..T-2, then one DecodeLayer per layer at
// position T-1 fed the golden hidden_in.
func TestDecodeLayerAfterPrefill(t *testing.T) {
	for _, name := range goldens {
		g := loadGolden(t, name, Options{})
		c := g.m.Cfg
		T, H, W := len(g.ids), c.HiddenSize, c.KVDim()
		r, err := g.m.Prefill(g.ids[:T-1], PrefillOptions{Dump: true, Logits: NoLogits})
		if err != nil {
			t.Fatal(err)
		}
		for i := range c.NumLayers {
			for _, lay := range []Layout{Ring, Roll} {
				lc := g.m.NewLayerCache(i, lay, T)
				lc.Fill(r.Key[i], r.Value[i])
				in := g.ref["hidden_in."+strconv.Itoa(i)][(T-1)*H : T*H]
				out, k, v, err := g.m.DecodeLayer(i, in, T-1, lc)
				if err != nil {
					t.Fatal(err)
				}
				next := "hidden_out"
				if i+1 < c.NumLayers {
					next = "hidden_in." + strconv.Itoa(i+1)
				}
				s := strconv.Itoa(i)
				for _, chk := range []struct {
					name     string
					ref, got []float32
				}{
					{next, g.ref[next][(T-1)*H : T*H], out},
					{"key." + s, g.ref["key."+s][(T-1)*W : T*W], k},
					{"value." + s, g.ref["value."+s][(T-1)*W : T*W], v},
				} {
					if d := Compare(chk.ref, chk.got); d.SNR < 100 || d.MaxAbsDiff > 1e-4*d.MaxAbsRef {
						t.Errorf("%s layer %d %v: %s at position %d: %v", name, i, lay, chk.name, T-1, d)
					}
				}
			}
		}
	}
}

// TestTanhGELU switches the tied golden checkpoint to hidden_act
// gelu_pytorch_tanh. The golden README measured what that change does to
// the float64 reference: min SNR 82.7 dB, in key.6. Our tanh path must land
// there too (not at 124 dB: erf still used; not far below: a wrong formula).
func TestTanhGELU(t *testing.T) {
	src := filepath.Join(goldenDir, goldens[0])
	dir := t.TempDir()
	cfg, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg = bytes.Replace(cfg, []byte(`"hidden_act": "gelu"`), []byte(`"hidden_act": "gelu_pytorch_tanh"`), 1)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(must(filepath.Abs(src)), "model.safetensors"), filepath.Join(dir, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	g := loadGolden(t, goldens[0], Options{})
	m, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.Cfg.TanhGELU() {
		t.Fatal("config edit did not select tanh")
	}
	r, err := m.Prefill(g.ids, PrefillOptions{Dump: true})
	if err != nil {
		t.Fatal(err)
	}
	worst, where := math.Inf(1), ""
	for i := range m.Cfg.NumLayers {
		s := strconv.Itoa(i)
		for name, got := range map[string][]float32{"key." + s: r.Key[i], "value." + s: r.Value[i], "hidden_in." + s: r.HiddenIn[i]} {
			if d := Compare(g.ref[name], got); d.SNR < worst {
				worst, where = d.SNR, name
			}
		}
	}
	t.Logf("tanh GELU vs the erf golden: min SNR %.1f dB in %s (README: 82.7 dB in key.6)", worst, where)
	if worst < 81.7 || worst > 83.7 || where != "key.6" {
		t.Errorf("min SNR %.1f dB in %s, want 82.7 +- 1 dB in key.6", worst, where)
	}
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

// TestDecodeLayersBatch decodes three sequences at once, each a prefix of
// the golden ids at its own position (before and past the sliding window)
// with its own caches, and checks every row against the golden layer
// outputs and the batch of one (DecodeLayer) row for row.
func TestDecodeLayersBatch(t *testing.T) {
	for _, name := range goldens {
		g := loadGolden(t, name, Options{})
		c := g.m.Cfg
		T, H, W := len(g.ids), c.HiddenSize, c.KVDim()
		pos := []int{T - 1, T / 2, 3}
		for i := range c.NumLayers {
			var caches []*LayerCache
			in := make([]float32, 0, len(pos)*H)
			for _, p := range pos {
				r, err := g.m.Prefill(g.ids[:p], PrefillOptions{Dump: true, Logits: NoLogits})
				if err != nil {
					t.Fatal(err)
				}
				lc := g.m.NewLayerCache(i, AutoLayout(c, i), T)
				lc.Fill(r.Key[i], r.Value[i])
				caches = append(caches, lc)
				in = append(in, g.ref["hidden_in."+strconv.Itoa(i)][p*H:(p+1)*H]...)
			}
			out, k, v, err := g.m.DecodeLayers(i, in, pos, caches)
			if err != nil {
				t.Fatal(err)
			}
			next := "hidden_out"
			if i+1 < c.NumLayers {
				next = "hidden_in." + strconv.Itoa(i+1)
			}
			for b, p := range pos {
				one, k1, v1, err := g.m.DecodeLayer(i, in[b*H:(b+1)*H], p, caches[b])
				if err != nil {
					t.Fatal(err)
				}
				if d := Compare(g.ref[next][p*H:(p+1)*H], out[b*H:(b+1)*H]); d.SNR < 100 {
					t.Errorf("%s layer %d row %d (position %d): %s %v", name, i, b, p, next, d)
				}
				for _, chk := range []struct{ got, one []float32 }{{out[b*H : (b+1)*H], one}, {k[b*W : (b+1)*W], k1}, {v[b*W : (b+1)*W], v1}} {
					if d := Compare(chk.one, chk.got); d.SNR < 120 {
						t.Errorf("%s layer %d row %d: batch vs single %v", name, i, b, d)
					}
				}
			}
		}
	}
	g := loadGolden(t, goldens[0], Options{})
	if _, _, _, err := g.m.DecodeLayers(0, make([]float32, 2*g.m.Cfg.HiddenSize), []int{0}, nil); err == nil {
		t.Error("a batch of 2 rows, 1 position and no caches was accepted")
	}
}

// TestDropLayers: after DropLayers the model loads its layers again and
// computes the same bits.
func TestDropLayers(t *testing.T) {
	g := loadGolden(t, goldens[0], Options{CachedLayers: 1})
	c := g.m.Cfg
	x, err := g.m.Embed(g.ids)
	if err != nil {
		t.Fatal(err)
	}
	a, b := slices.Clone(x), slices.Clone(x)
	if _, _, err := g.m.ForwardLayer(0, a, len(g.ids), nil); err != nil {
		t.Fatal(err)
	}
	g.m.DropLayers()
	if len(g.m.layers.layers) != 0 || len(g.m.bufs) != 0 {
		t.Fatalf("%d layers, %d buffers kept", len(g.m.layers.layers), len(g.m.bufs))
	}
	if _, _, err := g.m.ForwardLayer(0, b, len(g.ids), nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a, b) || c.NumLayers < 1 {
		t.Error("layer 0 differs after DropLayers")
	}
}
