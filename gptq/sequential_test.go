package gptq

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sparkconv/convert"
	"sparkconv/corpus"
	"sparkconv/dtype"
	"sparkconv/fixtures/fixturestest"
	"sparkconv/forward"
	"sparkconv/outdir"
	"sparkconv/quant"
	"sparkconv/safetensors"
	"sparkconv/spark"
	"sparkconv/tokenizer"
)

// testBudget keeps the tiny fixture's calibration near a second while
// giving every Hessian more rows than channels (down_proj: K = 768).
const testBudget = 1024

func runGPTQ(t *testing.T, in, out string, c *Calibrator, quantHead bool) *convert.Report {
	t.Helper()
	o, f := convert.Options{Model: in, Out: out, Quiet: true, Version: "test"}, convert.W4A8{Group: 64, QuantHead: quantHead}
	r, err := convert.Convert(context.Background(), o, f, c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestCalibratedGPTQ: a calibrated gptq run on the tied tiny model writes
// a config that says what happened, reports every module (the tied head
// as lm_head, from the final norm), and GPTQ beats round to nearest on
// held-out tokens for every module, by at least 15 % (measured: 0.008x to
// 0.48x, and 0.82x for layer 0's down_proj: 922 Hessian rows against its
// K = 768).
func TestCalibratedGPTQ(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	out := filepath.Join(t.TempDir(), "q")
	rep := runGPTQ(t, in, out, &Calibrator{Budget: testBudget}, true)
	qc := readJSON(t, filepath.Join(out, "config.json"))["quantization_config"].(map[string]any)
	sum := sha256.Sum256([]byte(corpus.Calib))
	want := map[string]any{"damp_percent": 0.01, "true_sequential": true, "static_groups": false, "desc_act": false}
	for k, v := range want {
		if qc[k] != v {
			t.Errorf("quantization_config.%s = %v, want %v", k, qc[k], v)
		}
	}
	meta := qc["meta"].(map[string]any)
	cal := meta["calibration"].(map[string]any)
	if meta["method"] != "gptq" || cal["sha256"] != hex.EncodeToString(sum[:]) || cal["tokens"] != float64(testBudget) ||
		meta["true_sequential"] != true || !strings.HasPrefix(meta["sequential"].(string), "true sequential") {
		t.Errorf("meta = %v", meta)
	}
	if c := rep.Calibration; c.HessianTokens+c.HeldOutTokens != testBudget || c.HeldOutTokens != testBudget/HoldOut || len(c.Fallbacks) != 0 {
		t.Errorf("calibration %+v", c)
	}
	seen := map[string]bool{}
	for _, tr := range rep.Tensors {
		g := tr.GPTQ
		if g == nil {
			t.Fatalf("%s has no GPTQ record", tr.Name)
		}
		seen[tr.Name] = true
		if g.Method != "gptq" || g.DampPercent != 0.01 || g.HeldOutRows != testBudget/HoldOut || !(g.OutErr < 0.85*g.OutErrRTN) {
			t.Errorf("%s: %+v", tr.Name, g)
		}
		if tr.Name == spark.EmbedName && g.Input != "final_norm" {
			t.Errorf("head calibrated on %s", g.Input)
		}
	}
	if len(seen) != 4*5+1 || !seen[spark.EmbedName] {
		t.Errorf("reported %d tensors: %v", len(seen), seen)
	}
	ck, err := safetensors.OpenDir(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if !ck.Has("lm_head.qweight") || ck.Has(spark.HeadName) {
		t.Error("the tied head was not written as lm_head.qweight")
	}
	entries, _ := os.ReadDir(out)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") && e.Name() != outdir.MarkerName {
			t.Errorf("scratch file %s left in the output", e.Name())
		}
	}
}

// fileSums hashes every file of dir but the report (which has timings).
func fileSums(t *testing.T, dir string) map[string]string {
	t.Helper()
	sums := map[string]string{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() == convert.ReportFile {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		h := sha256.Sum256(b)
		sums[e.Name()] = hex.EncodeToString(h[:])
	}
	return sums
}

// TestCalibratedDeterministic: the same inputs give byte-identical files;
// act-order changes the codes and says so in the config.
func TestCalibratedDeterministic(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	dir := t.TempDir()
	runGPTQ(t, in, filepath.Join(dir, "a"), &Calibrator{Budget: testBudget}, false)
	runGPTQ(t, in, filepath.Join(dir, "b"), &Calibrator{Budget: testBudget}, false)
	a, b := fileSums(t, filepath.Join(dir, "a")), fileSums(t, filepath.Join(dir, "b"))
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two runs differ:\n%v\n%v", a, b)
	}
	runGPTQ(t, in, filepath.Join(dir, "act"), &Calibrator{Budget: testBudget, ActOrder: true}, false)
	if c := fileSums(t, filepath.Join(dir, "act")); c["model.safetensors"] == a["model.safetensors"] {
		t.Error("act-order gave the same codes")
	}
	qc := readJSON(t, filepath.Join(dir, "act", "config.json"))["quantization_config"].(map[string]any)
	if qc["static_groups"] != true || qc["desc_act"] != false {
		t.Errorf("act-order config: static_groups %v desc_act %v", qc["static_groups"], qc["desc_act"])
	}
}

// TestCalibratedInterrupted: a cancelled calibration leaves nothing behind.
func TestCalibratedInterrupted(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	parent := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	c := &Calibrator{Budget: testBudget, Log: cancelOnWrite{cancel}}
	o, f := convert.Options{Model: in, Out: filepath.Join(parent, "q"), Quiet: true}, convert.W4A8{Group: 64}
	// The first line the calibrator logs is its summary, after the solve:
	// cancel there, before the writer runs.
	if _, err := convert.Convert(ctx, o, f, c); err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("interrupted run: %v", err)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Errorf("left %v", entries)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if _, err := convert.Convert(ctx, o, f, c); err == nil {
		t.Fatal("cancelled run succeeded")
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Errorf("left %v", entries)
	}
}

type cancelOnWrite struct{ cancel context.CancelFunc }

func (c cancelOnWrite) Write(p []byte) (int, error) { c.cancel(); return len(p), nil }

// TestCalibratedW8A8: the int8 scales are compressed-tensors' amax/127.5 of
// the original weights (as the config's observer says), the codes GPTQ's.
func TestCalibratedW8A8(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	dir := t.TempDir()
	r, err := convert.Convert(context.Background(), convert.Options{Model: in, Out: filepath.Join(dir, "g"), Quiet: true}, convert.W8A8{}, &Calibrator{Budget: testBudget})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := convert.Convert(context.Background(), convert.Options{Model: in, Out: filepath.Join(dir, "r"), Quiet: true}, convert.W8A8{}, nil); err != nil {
		t.Fatal(err)
	}
	g, err := safetensors.OpenDir(filepath.Join(dir, "g"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	rt, err := safetensors.OpenDir(filepath.Join(dir, "r"))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	differ := 0
	for _, tr := range r.Tensors {
		mod := strings.TrimSuffix(tr.Name, ".weight")
		_, sa, _ := g.Raw(mod + ".weight_scale")
		_, sb, _ := rt.Raw(mod + ".weight_scale")
		if string(sa) != string(sb) {
			t.Errorf("%s: scales differ from round to nearest's", mod)
		}
		_, ca, _ := g.Raw(mod + ".weight")
		_, cb, _ := rt.Raw(mod + ".weight")
		for i := range ca {
			if ca[i] != cb[i] {
				differ++
			}
		}
		if tr.GPTQ == nil || !(tr.GPTQ.OutErr < tr.GPTQ.OutErrRTN) {
			t.Errorf("%s: %+v", tr.Name, tr.GPTQ)
		}
	}
	if len(r.Tensors) != 20 || differ == 0 {
		t.Errorf("%d tensors, %d codes differ from round to nearest", len(r.Tensors), differ)
	}
}

// TestCalibratedW4A16: the asymmetric grid through the same solve.
func TestCalibratedW4A16(t *testing.T) {
	in := fixturestest.Tiny(t, true)
	out := filepath.Join(t.TempDir(), "w")
	r, err := convert.Convert(context.Background(), convert.Options{Model: in, Out: out, Quiet: true}, convert.W4A16{Group: 128, QuantHead: true}, &Calibrator{Budget: testBudget})
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range r.Tensors {
		if tr.GPTQ == nil || !(tr.GPTQ.OutErr < tr.GPTQ.OutErrRTN) {
			t.Errorf("%s: %+v", tr.Name, tr.GPTQ)
		}
	}
	meta := readJSON(t, filepath.Join(out, "config.json"))["quantization_config"].(map[string]any)["meta"].(map[string]any)
	if meta["method"] != "gptq" || meta["damp_percent"] != 0.01 {
		t.Errorf("meta %v", meta)
	}
}

// TestRefusedText: text the tokenizer turns into a handful of ids is
// refused before anything is written.
func TestRefusedText(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	dir := t.TempDir()
	samples := filepath.Join(dir, "same.txt")
	os.WriteFile(samples, []byte(strings.Repeat("aaaa aaaa aaaa\n", 400)), 0o644)
	parent := filepath.Join(dir, "out")
	os.Mkdir(parent, 0o755)
	_, err := convert.Convert(context.Background(), convert.Options{Model: in, Out: filepath.Join(parent, "q"), Quiet: true}, convert.W4A8{Group: 64}, &Calibrator{Files: []string{samples}})
	if err == nil || !strings.Contains(err.Error(), "distinct ids") {
		t.Fatalf("repetitive text: %v", err)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Errorf("left %v", entries)
	}
}

// TestNeverWorseThanRTN: with too few tokens for a full-rank down_proj
// Hessian (256 < K = 768), every module's chosen codes are still no worse
// than round to nearest on held-out rows (solved again with more damping,
// or rounded to nearest), and every fallback is in the calibration record.
func TestNeverWorseThanRTN(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	rep := runGPTQ(t, in, filepath.Join(t.TempDir(), "q"), &Calibrator{Budget: 256}, false)
	falls := map[string]bool{}
	for _, f := range rep.Calibration.Fallbacks {
		falls[f.Module] = true
	}
	more := checkRedamped(t, rep)
	rtn := 0
	for _, tr := range rep.Tensors {
		g := tr.GPTQ
		if g.OutErr > g.OutErrRTN {
			t.Errorf("%s: held-out error %.4g above round to nearest's %.4g", tr.Name, g.OutErr, g.OutErrRTN)
		}
		mod := strings.TrimSuffix(tr.Name, ".weight")
		if (g.Method == "rtn") != falls[mod] || (g.Method == "rtn") != (g.Fallback != "") {
			t.Errorf("%s: method %s, fallback %q, in the calibration's list: %v", tr.Name, g.Method, g.Fallback, falls[mod])
		}
		if g.Method == "rtn" {
			rtn++
		}
		if g.Note != "" {
			t.Logf("%s: %s", tr.Name, g.Note)
		}
	}
	t.Logf("%d of %d modules rounded to nearest, %d solved with more damping", rtn, len(rep.Tensors), more)
}

// TestShortText: text with fewer tokens than the budget is all used, and
// the log says so.
func TestShortText(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	dir := t.TempDir()
	samples := filepath.Join(dir, "short.txt")
	os.WriteFile(samples, []byte(strings.Join(strings.Split(corpus.Calib, "\n---\n")[:6], "\n---\n")), 0o644)
	var log strings.Builder
	rep := runGPTQ(t, in, filepath.Join(dir, "q"), &Calibrator{Files: []string{samples}, Budget: 1 << 20, Log: &log}, false)
	n := rep.Calibration.Tokens
	if want := fmt.Sprintf("gives %d tokens, fewer than the budget of %d", n, 1<<20); n <= 0 || !strings.Contains(log.String(), want) {
		t.Errorf("%d tokens; log %q", n, log.String())
	}
}

// TestOneTokenChunk: a sample one token longer than the chunk length ends
// in a chunk of one token, which the float stream of the float target
// runs on the checkpoint's bf16 weights like any other chunk.
func TestOneTokenChunk(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	dir := t.TempDir()
	texts := strings.Split(corpus.Calib, "\n---\n")[:4]
	tok, err := tokenizer.Load(filepath.Join(in, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var first, all int // the first sample's tokens, every sample's
	for i, text := range texts {
		ids, err := tok.Encode(text, true)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = len(ids)
		}
		all += len(ids)
	}
	samples := filepath.Join(dir, "s.txt")
	os.WriteFile(samples, []byte(strings.Join(texts, "\n---\n")), 0o644)
	c := &Calibrator{Files: []string{samples}, Budget: 1 << 20, SeqLen: first - 1, FloatTarget: 0.25}
	rep := runGPTQ(t, in, filepath.Join(dir, "q"), c, false)
	// Every token ran, the first sample's last one as a chunk of its own.
	if len(rep.Tensors) != 4*5 || rep.Calibration.Tokens != int64(all) {
		t.Errorf("%d tensors reported, %d tokens run, want 20 and %d", len(rep.Tensors), rep.Calibration.Tokens, all)
	}
}

// onGrid reports whether every group of gs weights of w holds at most 16
// distinct values (4-bit codes times one scale), as dequantized codes do
// and float weights do not.
func onGrid(w []float32, gs int) bool {
	for g0 := 0; g0 < len(w); g0 += gs {
		seen := map[float32]bool{}
		for _, v := range w[g0 : g0+gs] {
			seen[v] = true
		}
		if len(seen) > 16 {
			return false
		}
	}
	return true
}

// TestTrueSequential: each stage of a layer runs over the chunks with the
// linears before it already replaced by their dequantized codes and the
// ones after it still float: o_proj's input comes from the quantized
// q_k_v_proj, gate/up's from the quantized o_proj, down_proj's from the
// quantized gate/up, the next layer's from the quantized down_proj.
func TestTrueSequential(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	type state struct{ qkv, o, gate, up, down bool }
	got := map[forward.Point]state{}
	c := &Calibrator{Budget: testBudget, layerLimit: 1, beforePass: func(i int, p forward.Point, l *forward.Layer) {
		got[p] = state{onGrid(l.QKV, 64), onGrid(l.O, 64), onGrid(l.Gate, 64), onGrid(l.Up, 64), onGrid(l.Down, 64)}
	}}
	o, f := convert.Options{Model: in, Out: filepath.Join(t.TempDir(), "q"), Quiet: true}, convert.W4A8{Group: 64}
	convert.Convert(context.Background(), o, f, c) // stops at the writer: only layer 0 is solved
	want := map[forward.Point]state{
		forward.AttnNorm:  {},
		forward.AttnGated: {qkv: true},
		forward.MLPNorm:   {qkv: true, o: true},
		forward.MLPAct:    {qkv: true, o: true, gate: true, up: true},
		-1:                {true, true, true, true, true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("weights quantized before each pass: got %+v, want %+v", got, want)
	}
}

// checkRedamped checks that the calibration's redamped list names exactly
// the modules whose kept GPTQ codes used more damping than requested, at
// the damping each used, and returns how many there are.
func checkRedamped(t *testing.T, rep *convert.Report) int {
	t.Helper()
	redamped := map[string]float64{}
	for _, d := range rep.Calibration.Redamped {
		redamped[d.Module] = d.DampPercent
	}
	for _, tr := range rep.Tensors {
		g := tr.GPTQ
		mod := strings.TrimSuffix(tr.Name, ".weight")
		if tr.Name == "model.embed_tokens.weight" {
			mod = "lm_head"
		}
		d, ok := redamped[mod]
		if want := g.Method == "gptq" && g.DampPercent != rep.Calibration.DampPercent; ok != want || (ok && d != g.DampPercent) {
			t.Errorf("%s: method %s at damping %g; the redamped list has it: %v (%g)", tr.Name, g.Method, g.DampPercent, ok, d)
		}
	}
	return len(redamped)
}

// TestRedamped: modules solved again with more damping (every retry
// damping tried on every module, the best held-out codes kept) are named
// with the damping they used in the calibration record, and the config's
// meta says the same.
func TestRedamped(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	out := filepath.Join(t.TempDir(), "q")
	rep := runGPTQ(t, in, out, &Calibrator{Budget: 256, retryAll: true}, false)
	n := checkRedamped(t, rep)
	if n == 0 {
		t.Fatal("no module kept codes solved with more damping: the record is untested")
	}
	cfg, err := os.ReadFile(filepath.Join(out, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Q struct {
			Meta struct {
				Redamped []string `json:"redamped"`
			} `json:"meta"`
		} `json:"quantization_config"`
	}
	if err := json.Unmarshal(cfg, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Q.Meta.Redamped) != n {
		t.Errorf("config meta.redamped %v, want %d entries", c.Q.Meta.Redamped, n)
	}
	for k, d := range rep.Calibration.Redamped {
		if want := fmt.Sprintf("%s: %g", d.Module, d.DampPercent); k >= len(c.Q.Meta.Redamped) || c.Q.Meta.Redamped[k] != want {
			t.Errorf("meta.redamped[%d] = %v, want %q", k, c.Q.Meta.Redamped, want)
		}
	}
	t.Logf("%d of %d modules solved with more damping: %v", n, len(rep.Tensors), c.Q.Meta.Redamped)
}

// TestCalibratedW4A8ZP: GPTQ with the float target on the integer-zero
// grid beats round to nearest on every held-out module, and the report's
// weight SNR is of the written weights against the model's own (not
// against the float target the codes were solved toward).
func TestCalibratedW4A8ZP(t *testing.T) {
	in := fixturestest.Tiny(t, false)
	out := filepath.Join(t.TempDir(), "zp")
	r, err := convert.Convert(context.Background(), convert.Options{Model: in, Out: out, Quiet: true}, convert.W4A8ZP{Group: 32}, &Calibrator{Budget: testBudget, FloatTarget: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	src, err := spark.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	w, err := convert.OpenWeights(out)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, tr := range r.Tensors {
		if tr.GPTQ == nil || !(tr.GPTQ.OutErr < tr.GPTQ.OutErrRTN) {
			t.Errorf("%s: %+v", tr.Name, tr.GPTQ)
		}
		n, k := int(tr.Shape[0]), int(tr.Shape[1])
		info, raw, err := src.Raw(tr.Name)
		if err != nil {
			t.Fatal(err)
		}
		orig := make([]float32, n*k)
		if err := dtype.ToFloat32(orig, raw, info.DType); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, n*k)
		if _, err := w.Dequantize(tr.Name, got); err != nil {
			t.Fatal(err)
		}
		if snr := quant.Compare(orig, got).SNRdB(); math.Abs(snr-tr.SNRdB) > 1e-9 {
			t.Errorf("%s: report says %.6f dB, the written weights give %.6f dB against the model's", tr.Name, tr.SNRdB, snr)
		}
	}
}
