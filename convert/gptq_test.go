package convert

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"sparkconv/fixtures/fixturestest"
	"sparkconv/safetensors"
	"sparkconv/spark"
)

// The decoder below is written from docs/formats.md#gptq-tensors-and-packing (GPTQ v1), not
// from the packers: it checks the files.

// decF16 decodes an IEEE binary16 value: 1 sign, 5 exponent (bias 15), 10
// mantissa bits.
func decF16(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e, m := int(h>>10&0x1f), float64(h&0x3ff)
	switch e {
	case 0:
		return sign * m * math.Pow(2, -24)
	case 31:
		if m == 0 {
			return sign * math.Inf(1)
		}
		return math.NaN()
	}
	return sign * (1 + m/1024) * math.Pow(2, float64(e-15))
}

// gptqLinear is one decoded GPTQ v1 linear.
type gptqLinear struct {
	n, k, g int
	q       []int     // [k*n]: q[k][n]
	zero    []int     // [k/g * n]: true zero point (stored nibble + 1)
	scale   []float64 // [k/g * n]
	gidx    []int     // [k]
}

// value is scale[g_idx[k], n] * (q[k, n] - zero[g_idx[k], n]).
func (l *gptqLinear) value(n, k int) float64 {
	g := l.gidx[k]
	return l.scale[g*l.n+n] * float64(l.q[k*l.n+n]-l.zero[g*l.n+n])
}

func readGPTQ(t *testing.T, ck *safetensors.Checkpoint, module string, n, k, g int) *gptqLinear {
	t.Helper()
	get := func(suffix, dt string, shape ...int64) []byte { return rawPart(t, ck, module, suffix, dt, shape...) }
	groups := k / g
	qw := get("qweight", "I32", int64(k/8), int64(n))
	qz := get("qzeros", "I32", int64(groups), int64(n/8))
	sc := get("scales", "F16", int64(groups), int64(n))
	gi := get("g_idx", "I32", int64(k))
	l := &gptqLinear{n: n, k: k, g: g, q: make([]int, k*n), zero: make([]int, groups*n), scale: make([]float64, groups*n), gidx: make([]int, k)}
	for r := 0; r < k/8; r++ {
		for c := 0; c < n; c++ {
			word := binary.LittleEndian.Uint32(qw[4*(r*n+c):])
			for j := 0; j < 8; j++ {
				l.q[(8*r+j)*n+c] = int(word >> (4 * j) & 15)
			}
		}
	}
	for gr := 0; gr < groups; gr++ {
		for c := 0; c < n/8; c++ {
			word := binary.LittleEndian.Uint32(qz[4*(gr*(n/8)+c):])
			if word != 0x77777777 {
				t.Fatalf("%s.qzeros[%d, %d] = %#x, want 0x77777777", module, gr, c, word)
			}
			for j := 0; j < 8; j++ {
				l.zero[gr*n+8*c+j] = int(word>>(4*j)&15) + 1 // v1 stores zero - 1
			}
		}
	}
	for i := range l.scale {
		l.scale[i] = decF16(binary.LittleEndian.Uint16(sc[2*i:]))
	}
	for i := range l.gidx {
		l.gidx[i] = int(int32(binary.LittleEndian.Uint32(gi[4*i:])))
		if l.gidx[i] != i/g {
			t.Fatalf("%s.g_idx[%d] = %d, want %d", module, i, l.gidx[i], i/g)
		}
	}
	return l
}

// plainSNR is GPTQ's symmetric absmax rule written from docs/formats.md#gptq-zero-points-and-grid:
// scale = fp16(2*amax/15) per group (an all-zero group uses 2/15),
// q = clamp(round(w/scale) + 8, 0, 15), w' = (q - 8)*scale.
func plainSNR(w []float64, n, k, g int) float64 {
	var sig, noise float64
	for r := 0; r < n; r++ {
		for gi := 0; gi < k/g; gi++ {
			seg := w[r*k+gi*g : r*k+(gi+1)*g]
			amax := 0.0
			for _, x := range seg {
				amax = max(amax, math.Abs(x))
			}
			if amax == 0 {
				amax = 1
			}
			s := roundF16(2 * amax / 15)
			for _, x := range seg {
				q := min(max(math.RoundToEven(x/s)+8, 0), 15)
				d := (q-8)*s - x
				sig += x * x
				noise += d * d
			}
		}
	}
	return 10 * math.Log10(sig/noise)
}

// roundF16 rounds a normal-range positive x to 11 significant bits.
func roundF16(x float64) float64 {
	e := math.Floor(math.Log2(x))
	e = max(e, -14) // subnormals keep the 2^-24 step
	step := math.Pow(2, e-10)
	return math.RoundToEven(x/step) * step
}

// TestGPTQDecode decodes a --quant-head checkpoint of the tied tiny model,
// checks it against the input and the report, and the config.
func TestGPTQDecode(t *testing.T) {
	for _, g := range []int{32, 64, 128} {
		t.Run("g"+strconv.Itoa(g), func(t *testing.T) {
			in := fixturestest.Tiny(t, false)
			out := filepath.Join(t.TempDir(), "gptq")
			rep := runConvert(t, Options{Model: in, Out: out}, W4A8{Group: g, QuantHead: true})
			checkGPTQ(t, in, out, rep, g, true, false)
		})
	}
}

func checkGPTQ(t *testing.T, in, out string, rep *Report, g int, quantHead, noSearch bool) {
	t.Helper()
	cfg := readConfig(t, out)
	qc := cfg["quantization_config"].(map[string]any)
	method, mse := "rtn-mse-search", 2.0
	if noSearch {
		method, mse = "rtn-absmax", 0
	}
	want := map[string]any{
		"quant_method": "gptq", "checkpoint_format": "gptq", "bits": 4.0, "group_size": float64(g),
		"sym": true, "desc_act": false, "lm_head": quantHead, "pack_dtype": "int32",
		"dynamic":         map[string]any{"-:.*g_proj": map[string]any{}},
		"true_sequential": false, "static_groups": false,
		"meta": map[string]any{"quantizer": []any{"sparkconv:test"}, "method": method, "calibration": "none", "mse": mse},
	}
	for k, v := range want {
		if !reflect.DeepEqual(qc[k], v) {
			t.Errorf("quantization_config.%s = %v, want %v", k, qc[k], v)
		}
	}
	if _, ok := qc["damp_percent"]; ok {
		t.Error("damp_percent written although no Hessian step ran")
	}
	if cfg["tie_word_embeddings"] != !quantHead {
		t.Errorf("tie_word_embeddings = %v", cfg["tie_word_embeddings"])
	}
	src, dst := openConverted(t, in, out)
	reported := map[string]TensorReport{}
	for _, r := range rep.Tensors {
		reported[r.Name] = r
	}
	targets := Targets(src.Config, quantHead)
	var gain float64
	for _, tg := range targets {
		_, raw, _ := src.Raw(tg.Source)
		ref := decBF16(raw)
		l := readGPTQ(t, dst, tg.Module, tg.N, tg.K, g)
		snr, maxErr := snrOf(ref, l.value, tg.N, tg.K)
		r, ok := reported[tg.Source]
		if !ok {
			t.Fatalf("%s not reported", tg.Source)
		}
		if p := plainSNR(ref, tg.N, tg.K, g); math.Abs(p-*r.PlainSNRdB) > 1e-3 {
			t.Errorf("%s: absmax SNR %.5f dB, report's plain %.5f", tg.Source, p, *r.PlainSNRdB)
		}
		gain += checkTarget(t, dst, tg, r, snr, maxErr)
	}
	gain /= float64(len(targets))
	if !noSearch && gain < 0.4 {
		t.Errorf("the search gained %.3f dB on average, want >= 0.4", gain)
	}
	t.Logf("g%d: %d tensors, SNR mean %.2f dB (plain %.2f), gain %.2f dB", g, len(targets), rep.Totals.MeanSNRdB, rep.Totals.PlainMeanSNRdB, gain)
	checkCopied(t, src, dst, rep, targets, quantHead)
}

// TestGPTQNoSearch: absmax scales; the report's SNR is the plain one.
func TestGPTQNoSearch(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	out := filepath.Join(t.TempDir(), "gptq")
	rep := runConvert(t, Options{Model: in, Out: out}, W4A8{Group: 64, NoSearch: true})
	checkGPTQ(t, in, out, rep, 64, false, true)
	for _, r := range rep.Tensors {
		if r.SNRdB != *r.PlainSNRdB {
			t.Errorf("%s: %.4f vs plain %.4f", r.Name, r.SNRdB, *r.PlainSNRdB)
		}
	}
}

// TestGPTQUntiedHead: an untied head is quantized from lm_head.weight.
func TestGPTQUntiedHead(t *testing.T) {
	in := fixturestest.Tiny(t, true)
	out := filepath.Join(t.TempDir(), "gptq")
	rep := runConvert(t, Options{Model: in, Out: out}, W4A8{Group: 128, QuantHead: true})
	checkGPTQ(t, in, out, rep, 128, true, false)
	names := map[string]bool{}
	for _, r := range rep.Tensors {
		names[r.Name] = true
	}
	if !names[spark.HeadName] || names[spark.EmbedName] {
		t.Errorf("head read from the wrong tensor: %v", names)
	}
}

func TestGPTQRefusals(t *testing.T) {
	cases := []struct {
		name  string
		set   map[string]any // config.json changes (nil: the tiny model)
		f     W4A8
		flag  bool
		wants []string
	}{
		{"group 256", nil, W4A8{Group: 256}, true, []string{"--group 256", "[32 64 128]"}},
		{"group 16", nil, W4A8{Group: 16}, true, []string{"--group 16"}},
		{"K%32", map[string]any{"intermediate_size": 784}, W4A8{Group: 32}, false, []string{
			"model.layers.0.mlp.down_proj.weight [256, 784] (N=256 out, K=784 in): K=784 is not a multiple of 32",
			"model.layers.0.mlp.gate_proj.weight [784, 256] (N=784 out, K=256 in): N=784 is not a multiple of 32",
			"(and 3 more tensors)"}},
		{"group does not divide K", map[string]any{"intermediate_size": 800}, W4A8{Group: 128}, false, []string{
			"model.layers.0.mlp.down_proj.weight [256, 800] (N=256 out, K=800 in): --group 128 does not divide K=800"}},
		{"vocab%64", map[string]any{"vocab_size": 544}, W4A8{Group: 128, QuantHead: true}, false, []string{
			"model.embed_tokens.weight [544, 256] (N=544 out, K=256 in): vocab_size 544 is not a multiple of 64: vLLM pads"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var o Options
			if c.set != nil {
				o.Model = writeConfigOnly(t, c.set)
			}
			checkRefused(t, o, c.f, c.flag, c.wants)
		})
	}
	// vocab 544 without --quant-head is fine for the check.
	cfg, _ := spark.ParseConfig(mustRead(t, filepath.Join(writeConfigOnly(t, map[string]any{"vocab_size": 544}), "config.json")))
	if err := (W4A8{Group: 128}).Check(cfg); err != nil {
		t.Errorf("bf16 head refused: %v", err)
	}
}

// TestGPTQDeterministic: two runs give the same files; a sharded run and a
// run with a chooser that cannot recode give the same tensors.
func TestGPTQDeterministic(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	dir := t.TempDir()
	o, f := Options{Model: in}, W4A8{Group: 64, QuantHead: true}
	o.Out = filepath.Join(dir, "a")
	runConvert(t, o, f)
	o.Out = filepath.Join(dir, "b")
	runConvert(t, o, f)
	if a, b := treeSums(t, filepath.Join(dir, "a")), treeSums(t, filepath.Join(dir, "b")); !reflect.DeepEqual(a, b) {
		t.Errorf("two runs differ:\n%v\n%v", a, b)
	}
	ref := tensorBytes(t, filepath.Join(dir, "a"))
	for _, v := range []struct {
		name  string
		shard int64
	}{{"sharded", 64 << 10}, {"single", 0}} {
		c := rechoose{RTN: RTN{Kind: GridSym4, Search: true}, calls: map[string]int{}}
		o.Out, o.MaxShardSize, f.Chooser = filepath.Join(dir, v.name), v.shard, c
		runConvert(t, o, f)
		got := tensorBytes(t, o.Out)
		if len(got) != len(ref) {
			t.Fatalf("%s: %d tensors, want %d", v.name, len(got), len(ref))
		}
		for n, b := range ref {
			if got[n] != b {
				t.Errorf("%s: %s differs", v.name, n)
			}
		}
		// qweight (int32) is always written before scales (fp16), which
		// come from the cache: each linear is chosen once.
		for n, calls := range c.calls {
			if calls != 1 {
				t.Errorf("%s: %s chosen %d times", v.name, n, calls)
			}
		}
		if len(c.calls) != 4*5+1 {
			t.Errorf("%s: %d linears chosen", v.name, len(c.calls))
		}
	}
}
