package convert

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sparkconv/fixtures/fixturestest"
	"sparkconv/quant"
	"sparkconv/safetensors"
	"sparkconv/spark"
	"sparkconv/synthetic"
)

// The decoders below are written from docs/formats.md#w4a16-tinygemm (the
// cpu_int4 tensors, the kernel's layout and its scales and zeros), not from the packers: they check the files.

// w4Linear is one decoded tinygemm linear.
type w4Linear struct {
	n, k, g        int
	codes          []uint8   // [n*k]
	scale, zero    []float64 // [n*(k/g)]
	qweight, szRaw []byte
}

func (l *w4Linear) value(n, k int) float64 {
	i := n*(l.k/l.g) + k/l.g
	return float64(int(l.codes[n*l.k+k])-8)*l.scale[i] + l.zero[i]
}

// readW4 decodes module's portable qweight and scales_and_zeros.
func readW4(t *testing.T, ck *safetensors.Checkpoint, module string, n, k, g int) *w4Linear {
	t.Helper()
	qi, q, err := ck.Raw(module + ".qweight")
	if err != nil {
		t.Fatal(err)
	}
	si, sz, err := ck.Raw(module + ".scales_and_zeros")
	if err != nil {
		t.Fatal(err)
	}
	if qi.DType != "U8" || !reflect.DeepEqual(qi.Shape, []int64{int64(n), int64(k / 2)}) {
		t.Fatalf("%s.qweight is %s%v, want U8[%d %d]", module, qi.DType, qi.Shape, n, k/2)
	}
	if si.DType != "BF16" || !reflect.DeepEqual(si.Shape, []int64{int64(k / g), int64(n), 2}) {
		t.Fatalf("%s.scales_and_zeros is %s%v, want BF16[%d %d 2]", module, si.DType, si.Shape, k/g, n)
	}
	l := &w4Linear{n: n, k: k, g: g, codes: make([]uint8, n*k), qweight: q, szRaw: sz}
	for r := 0; r < n; r++ {
		for j := 0; j < k/2; j++ {
			b := q[r*(k/2)+j]
			l.codes[r*k+2*j], l.codes[r*k+2*j+1] = b&15, b>>4
		}
	}
	v := decBF16(sz)
	groups := k / g
	l.scale, l.zero = make([]float64, n*groups), make([]float64, n*groups)
	for gi := 0; gi < groups; gi++ {
		for r := 0; r < n; r++ {
			l.scale[r*groups+gi] = v[(gi*n+r)*2]
			l.zero[r*groups+gi] = v[(gi*n+r)*2+1]
		}
	}
	return l
}

// TestW4A16Decode decodes a --quant-head checkpoint of the tied tiny model
// and checks every tensor against the input and the report.
func TestW4A16Decode(t *testing.T) {
	for _, g := range []int{32, 128, 256} {
		t.Run("g"+strconv.Itoa(g), func(t *testing.T) {
			in := fixturestest.Tiny(t, false)
			out := filepath.Join(t.TempDir(), "w4")
			rep := runConvert(t, Options{Model: in, Out: out, Version: "test"}, W4A16{Group: g, QuantHead: true})
			checkW4A16(t, in, out, rep, g, true)
		})
	}
}

func checkW4A16(t *testing.T, in, out string, rep *Report, g int, quantHead bool) {
	t.Helper()
	cfg := readConfig(t, out)
	qc := cfg["quantization_config"].(map[string]any)
	want := map[string]any{"quant_method": "cpu_int4", "bits": 4.0, "group_size": float64(g), "sym": false,
		"zero_point_domain": "float", "pack": "portable", "scales_dtype": "bfloat16", "lm_head": quantHead}
	for k, v := range want {
		if !reflect.DeepEqual(qc[k], v) {
			t.Errorf("quantization_config.%s = %v, want %v", k, qc[k], v)
		}
	}
	if m := qc["meta"].(map[string]any); m["method"] != "rtn-mse-search" || !reflect.DeepEqual(m["quantizer"], []any{"sparkconv:test"}) {
		t.Errorf("meta = %v", m)
	}
	if cfg["tie_word_embeddings"] != !quantHead {
		t.Errorf("tie_word_embeddings = %v with quant head %v", cfg["tie_word_embeddings"], quantHead)
	}
	src, dst := openConverted(t, in, out)
	reported := map[string]TensorReport{}
	for _, r := range rep.Tensors {
		reported[r.Name] = r
	}
	var gain float64
	targets := Targets(src.Config, quantHead)
	for _, tg := range targets {
		_, raw, _ := src.Raw(tg.Source)
		l := readW4(t, dst, tg.Module, tg.N, tg.K, g)
		snr, maxErr := snrOf(decBF16(raw), l.value, tg.N, tg.K)
		r, ok := reported[tg.Source]
		if !ok {
			t.Fatalf("%s not in the report", tg.Source)
		}
		gain += checkTarget(t, dst, tg, r, snr, maxErr)
	}
	gain /= float64(len(targets))
	if gain < 0.3 {
		t.Errorf("the search gained %.3f dB on average, want >= 0.3", gain)
	}
	t.Logf("g%d: %d tensors, SNR mean %.2f dB (plain %.2f), gain %.2f dB", g, len(targets), rep.Totals.MeanSNRdB, rep.Totals.PlainMeanSNRdB, gain)
	checkCopied(t, src, dst, rep, targets, quantHead)
}

// TestW4A16NoSearch: plain parameters are torchao's tinygemm rule, group by
// group: scale = bf16(max((max-min)/15, 1e-6)), zero = bf16(min + 8*scale).
func TestW4A16NoSearch(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	out := filepath.Join(t.TempDir(), "w4")
	rep := runConvert(t, Options{Model: in, Out: out}, W4A16{Group: 64, NoSearch: true})
	if qc := readConfig(t, out)["quantization_config"].(map[string]any); qc["meta"].(map[string]any)["method"] != "rtn-minmax" {
		t.Errorf("method %v", qc["meta"])
	}
	src, _ := spark.Open(in)
	defer src.Close()
	dst, _ := safetensors.OpenDir(out)
	defer dst.Close()
	rnd := func(x float64) float64 { return decBF16(bf16Bytes(float32(x)))[0] }
	for _, tg := range Targets(src.Config, false) {
		_, raw, _ := src.Raw(tg.Source)
		w := decBF16(raw)
		l := readW4(t, dst, tg.Module, tg.N, tg.K, 64)
		bad := 0
		for n := 0; n < tg.N; n++ {
			for gi := 0; gi < tg.K/64; gi++ {
				seg := w[n*tg.K+gi*64 : n*tg.K+(gi+1)*64]
				lo, hi := slices.Min(seg), slices.Max(seg)
				s := rnd(max((hi-lo)/15, 1e-6))
				z := rnd(lo + 8*s)
				i := n*(tg.K/64) + gi
				// one bf16 ulp of slack for float32 vs float64 arithmetic
				if math.Abs(l.scale[i]-s) > s/128 || math.Abs(l.zero[i]-z) > math.Abs(z)/128+1e-9 {
					bad++
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d groups differ from the min/max rule", tg.Source, bad)
		}
	}
	for _, r := range rep.Tensors {
		if math.Abs(*r.PlainSNRdB-r.SNRdB) > 1e-9 {
			t.Errorf("%s: no-search SNR %.4f != plain %.4f", r.Name, r.SNRdB, *r.PlainSNRdB)
		}
	}
}

func bf16Bytes(f float32) []byte {
	u := math.Float32bits(f)
	u = (u + 0x7fff + ((u >> 16) & 1)) >> 16
	return []byte{byte(u), byte(u >> 8)}
}

// kernelBytes lays out codes [n, k] as docs/formats.md#tinygemm-layout states the kernel
// does: blocks of blockN channels, [K][blockN/2] bytes each; AVX-512 full
// block: bytes d = 0..15 hold (w[d+32] << 4) | w[d], bytes 16+d hold
// (w[d+48] << 4) | w[d+16]; AVX2 full block: byte d = (w[d+16] << 4) | w[d];
// a narrower last block: adjacent pairs (w[2j+1] << 4) | w[2j].
func kernelBytes(codes []uint8, n, k, blockN int) []byte {
	w := func(ch, kk int) byte { return codes[ch*k+kk] }
	var out []byte
	for n0 := 0; n0 < n; n0 += blockN {
		nb := min(blockN, n-n0)
		for kk := 0; kk < k; kk++ {
			switch {
			case nb == 64 && blockN == 64:
				for d := 0; d < 16; d++ {
					out = append(out, w(n0+d+32, kk)<<4|w(n0+d, kk))
				}
				for d := 0; d < 16; d++ {
					out = append(out, w(n0+d+48, kk)<<4|w(n0+d+16, kk))
				}
			case nb == 32 && blockN == 32:
				for d := 0; d < 16; d++ {
					out = append(out, w(n0+d+16, kk)<<4|w(n0+d, kk))
				}
			default:
				for j := 0; j < nb/2; j++ {
					out = append(out, w(n0+2*j+1, kk)<<4|w(n0+2*j, kk))
				}
			}
		}
	}
	return out
}

// buildPacks converts in to W4A16 with group g and a quantized head once
// per pack, and returns the output folders by pack.
func buildPacks(t *testing.T, in string, g int) map[string]string {
	t.Helper()
	dirs := map[string]string{}
	for _, p := range W4A16Packs {
		dirs[p] = filepath.Join(t.TempDir(), p)
		runConvert(t, Options{Model: in, Out: dirs[p]}, W4A16{Group: g, Pack: p, QuantHead: true})
	}
	return dirs
}

// TestW4A16KernelPacks: --pack avx512/avx2 hold the portable output's codes
// in the kernel's layout, byte for byte; everything else is identical.
func TestW4A16KernelPacks(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	dirs := buildPacks(t, in, 128)
	for _, p := range W4A16Packs {
		if got := readConfig(t, dirs[p])["quantization_config"].(map[string]any)["pack"]; got != p {
			t.Errorf("pack %s: config says %v", p, got)
		}
	}
	cfg, _ := spark.LoadConfig(in)
	port, _ := safetensors.OpenDir(dirs["portable"])
	defer port.Close()
	for _, p := range []string{"avx512", "avx2"} {
		ck, err := safetensors.OpenDir(dirs[p])
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range port.Names() {
			_, a, _ := port.Raw(name)
			_, b, err := ck.Raw(name)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(name, ".qweight") {
				if string(a) != string(b) {
					t.Errorf("%s: %s differs from the portable output", p, name)
				}
			}
		}
		for _, tg := range Targets(cfg, true) {
			l := readW4(t, port, tg.Module, tg.N, tg.K, 128)
			_, got, _ := ck.Raw(tg.Module + ".qweight")
			bn := map[string]int{"avx512": 64, "avx2": 32}[p]
			if want := kernelBytes(l.codes, tg.N, tg.K, bn); string(got) != string(want) {
				t.Errorf("%s %s.qweight: %d bytes differ from the kernel's layout", p, tg.Module, countDiff(got, want))
			}
		}
		ck.Close()
	}
}

func countDiff(a, b []byte) int {
	n := max(len(a), len(b)) - min(len(a), len(b))
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

// TestW4A16PackTails: N not a multiple of the block (AVX-512 tails of 16,
// 32, 48; AVX2 tail of 16) packs the last block as adjacent pairs.
func TestW4A16PackTails(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		pack string
		n, k int
	}{{"avx512", 80, 64}, {"avx512", 96, 32}, {"avx512", 112, 128}, {"avx512", 16, 8}, {"avx2", 48, 64}, {"avx2", 16, 6}, {"avx2", 64, 32}} {
		codes := make([]uint8, c.n*c.k)
		for i := range codes {
			codes[i] = uint8(rng.IntN(16))
		}
		got := make([]byte, c.n*c.k/2)
		if err := PackW4A16Codes(got, codes, c.n, c.k, c.pack); err != nil {
			t.Fatal(err)
		}
		bn := map[string]int{"avx512": 64, "avx2": 32}[c.pack]
		if want := kernelBytes(codes, c.n, c.k, bn); string(got) != string(want) {
			t.Errorf("%s N=%d K=%d: %d bytes differ", c.pack, c.n, c.k, countDiff(got, want))
		}
	}
}

func TestW4A16Refusals(t *testing.T) {
	odd := writeConfigOnly(t, map[string]any{"intermediate_size": 776})
	cases := []struct {
		name  string
		o     Options
		f     W4A16
		flag  bool     // a usage error (CheckFlags)
		wants []string // substrings of the message
	}{
		{"group 16", Options{}, W4A16{Group: 16}, true, []string{"--group 16", "32 64 128 256"}},
		{"group 96", Options{}, W4A16{Group: 96}, true, []string{"--group 96"}},
		{"pack", Options{}, W4A16{Group: 128, Pack: "neon"}, true, []string{`--pack "neon"`}},
		{"N%16", Options{Model: odd}, W4A16{Group: 128}, false, []string{
			"model.layers.0.mlp.gate_proj.weight [776, 256] (N=776 out, K=256 in): N=776 is not a multiple of 16",
			"model.layers.0.mlp.down_proj.weight [256, 776] (N=256 out, K=776 in): --group 128 does not divide K=776",
			"and 7 more tensors"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkRefused(t, c.o, c.f, c.flag, c.wants)
		})
	}
}

// TestW4A16Deterministic: two runs give the same files; a sharded run (where
// qweight can be written before or after its scales_and_zeros) the same
// tensors.
func TestW4A16Deterministic(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	a, b, c := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b"), filepath.Join(t.TempDir(), "c")
	o, f := Options{Model: in}, W4A16{Group: 64, QuantHead: true}
	o.Out = a
	runConvert(t, o, f)
	o.Out = b
	runConvert(t, o, f)
	if sa, sb := treeSums(t, a), treeSums(t, b); !reflect.DeepEqual(sa, sb) {
		t.Errorf("two runs differ:\n%v\n%v", sa, sb)
	}
	o.Out, o.MaxShardSize = c, 100<<10
	runConvert(t, o, f)
	ta, tc := tensorBytes(t, a), tensorBytes(t, c)
	if len(ta) != len(tc) {
		t.Fatalf("%d vs %d tensors", len(ta), len(tc))
	}
	for n, v := range ta {
		if tc[n] != v {
			t.Errorf("%s differs between the single-file and the sharded run", n)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(c, "model-*.safetensors")); len(files) < 3 {
		t.Errorf("sharded run wrote %d shards", len(files))
	}
}

// TestW4A16UntiedHead: an untied model's head is quantized from
// lm_head.weight with --quant-head and copied without it.
func TestW4A16UntiedHead(t *testing.T) {
	in := fixturestest.Tiny(t, true)
	q := filepath.Join(t.TempDir(), "q")
	rep := runConvert(t, Options{Model: in, Out: q}, W4A16{Group: 128, QuantHead: true})
	checkW4A16(t, in, q, rep, 128, true)
	found := false
	for _, r := range rep.Tensors {
		found = found || r.Name == spark.HeadName
	}
	if !found {
		t.Error("lm_head.weight not reported")
	}
	p := filepath.Join(t.TempDir(), "p")
	rep = runConvert(t, Options{Model: in, Out: p}, W4A16{Group: 128})
	cfg := readConfig(t, p)
	if cfg["tie_word_embeddings"] != false || cfg["quantization_config"].(map[string]any)["lm_head"] != false {
		t.Errorf("config %v", cfg)
	}
	src, _ := safetensors.OpenDir(in)
	dst, _ := safetensors.OpenDir(p)
	defer src.Close()
	defer dst.Close()
	_, a, _ := src.Raw(spark.HeadName)
	_, b, err := dst.Raw(spark.HeadName)
	if err != nil || string(a) != string(b) || dst.Has("lm_head.qweight") {
		t.Errorf("lm_head.weight not copied as is (%v)", err)
	}
}

// TestPlainStatsBlocks: the block-wise baseline equals one whole-matrix pass.
func TestPlainStatsBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	n, k := 3000, 512 // several blocks, the last one short
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * 0.02)
	}
	m := quant.F32Matrix(n, k, w)
	for _, g := range []GridKind{GridSym4, GridAsym4} {
		got, err := g.PlainStats(m, 128, quant.ScaleBF16)
		if err != nil {
			t.Fatal(err)
		}
		var r quant.Int4Result
		if err := g.quantize(&r, m, 128, quant.ScaleBF16, false); err != nil {
			t.Fatal(err)
		}
		if got.Count != r.Stats.Count || math.Abs(got.SNRdB()-r.Stats.SNRdB()) > 1e-9 {
			t.Errorf("%v: blocks %v, whole %v", g, got, r.Stats)
		}
	}
}

// TestW4A16Rechoose: scales_and_zeros (bf16) are written before qweight
// (uint8) in a file, so a chooser that cannot recode runs twice per linear
// and the output is unchanged.
func TestW4A16Rechoose(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	runConvert(t, Options{Model: in, Out: a}, W4A16{Group: 128, QuantHead: true})
	c := rechoose{RTN: RTN{Kind: GridAsym4, Search: true}, calls: map[string]int{}}
	runConvert(t, Options{Model: in, Out: b}, W4A16{Group: 128, QuantHead: true, Chooser: c})
	if !reflect.DeepEqual(tensorBytes(t, a), tensorBytes(t, b)) {
		t.Error("output differs with a chooser that cannot recode")
	}
	for n, calls := range c.calls {
		if calls != 2 {
			t.Errorf("%s chosen %d times, want 2", n, calls)
		}
	}
	if len(c.calls) != 4*5+1 {
		t.Errorf("%d linears chosen", len(c.calls))
	}
}

// BenchmarkW4A16Linear is the per-tensor path (choose codes and
// parameters, pack qweight and scales_and_zeros) in MB/s of bf16 input.
func BenchmarkW4A16Linear(b *testing.B) {
	for _, sh := range []struct{ n, k int }{{2048, 2048}, {6656, 2048}} {
		m := quant.BF16Matrix(sh.n, sh.k, syntheticBF16(sh.n, sh.k, 1))
		tg := Target{Source: "w", Module: "w", N: sh.n, K: sh.k}
		for _, pack := range []string{"portable", "avx512"} {
			for _, search := range []bool{true, false} {
				spec := Int4Spec{Target: tg, Grid: GridSpec{Kind: GridAsym4, Group: 128, DType: quant.ScaleBF16, Search: search},
					Chooser: RTN{Kind: GridAsym4, Search: search}, Parts: W4A16Parts(tg, 128, quant.ScaleBF16, pack)}
				b.Run(fmt.Sprintf("%dx%d/%s/search=%v", sh.n, sh.k, pack, search), func(b *testing.B) {
					benchEncodeInt4(b, spec, m)
				})
			}
		}
	}
}

// BenchmarkW4A16Write is the whole command on the small fixture, in MB/s
// of the input checkpoint's bf16 bytes.
func BenchmarkW4A16Write(b *testing.B) {
	in := fixturestest.Preset(b, "small", false)
	for _, search := range []bool{true, false} {
		b.Run(fmt.Sprintf("search=%v", search), func(b *testing.B) {
			bytes := int64(synthetic.Presets["small"].Bytes(true))
			b.SetBytes(bytes)
			c0 := cpuSeconds()
			i := 0
			for b.Loop() {
				i++
				o := Options{Model: in, Out: filepath.Join(b.TempDir(), strconv.Itoa(i)), Quiet: true}
				if _, err := Convert(context.Background(), o, W4A16{Group: 128, QuantHead: true, NoSearch: !search}, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(bytes)*float64(b.N)/1e6/(cpuSeconds()-c0), "MB/cpu-s")
		})
	}
}
