package convert

// Helpers shared by the format tests: running and refusing a conversion,
// decoders written from the formats, not from the writers, and file
// comparisons.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"sparkconv/fixtures/fixturestest"
	"sparkconv/quant"
	"sparkconv/safetensors"
	"sparkconv/spark"
)

// runConvert converts o.Model to f in o.Out, quietly, with version "test".
func runConvert(t *testing.T, o Options, f Format) *Report {
	t.Helper()
	o.Quiet, o.Version = true, "test"
	r, err := Convert(context.Background(), o, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkRefused converts o.Model (the tiny model when empty) to f and wants
// an error holding every one of wants, from f.CheckFlags when flag, and
// nothing written.
func checkRefused(t *testing.T, o Options, f Format, flag bool, wants []string) {
	t.Helper()
	if o.Model == "" {
		o.Model = fixturestest.Tiny(t, false)
	}
	parent := t.TempDir()
	o.Out = filepath.Join(parent, "out")
	if err := f.CheckFlags(); (err != nil) != flag {
		t.Errorf("CheckFlags = %v, want a usage error: %v", err, flag)
	}
	_, err := Convert(context.Background(), o, f, nil)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Errorf("wrote %v before refusing", entries)
	}
}

// decBF16 decodes little-endian bf16 bytes; written here from the format,
// not shared with the converter.
func decBF16(raw []byte) []float64 {
	out := make([]float64, len(raw)/2)
	for i := range out {
		out[i] = float64(math.Float32frombits(uint32(raw[2*i])<<16 | uint32(raw[2*i+1])<<24))
	}
	return out
}

// snrOf compares the decoded linear with the input weights.
func snrOf(ref []float64, at func(n, k int) float64, n, k int) (snr, maxErr float64) {
	var sig, noise float64
	for r := 0; r < n; r++ {
		for c := 0; c < k; c++ {
			x := ref[r*k+c]
			d := at(r, c) - x
			sig += x * x
			noise += d * d
			maxErr = max(maxErr, math.Abs(d))
		}
	}
	return 10 * math.Log10(sig/noise), maxErr
}

// checkTarget checks one quantized target of an int4 conversion against
// its report row r, given the SNR and max error of the decoded linear: they
// match the report, the search did not lose to the plain parameters, the
// SNR lies in 10-25 dB (4-bit on N(0, 0.02) weights whose outlier input
// columns (x10-50) widen the groups that hold them), and no float weight is
// written beside. It returns the search's gain over the plain parameters.
func checkTarget(t *testing.T, dst *safetensors.Checkpoint, tg Target, r TensorReport, snr, maxErr float64) (gain float64) {
	t.Helper()
	if math.Abs(snr-r.SNRdB) > 1e-3 || math.Abs(maxErr-r.MaxErr) > 1e-6*max(1, maxErr) {
		t.Errorf("%s: decoded SNR %.5f dB, max err %.4g; report %.5f, %.4g", tg.Source, snr, maxErr, r.SNRdB, r.MaxErr)
	}
	if *r.PlainSNRdB > r.SNRdB {
		t.Errorf("%s: the search lost: %.3f dB vs plain %.3f", tg.Source, r.SNRdB, *r.PlainSNRdB)
	}
	if snr < 10 || snr > 25 {
		t.Errorf("%s: SNR %.2f dB outside 10-25", tg.Source, snr)
	}
	if dst.Has(tg.Module + ".weight") {
		t.Errorf("%s.weight written beside the quantized tensors", tg.Module)
	}
	return r.SNRdB - *r.PlainSNRdB
}

// openConverted opens the input model and the converted checkpoint; both
// are closed when the test ends.
func openConverted(t *testing.T, in, out string) (*spark.Model, *safetensors.Checkpoint) {
	t.Helper()
	src, err := spark.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	dst, err := safetensors.OpenDir(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Close() })
	return src, dst
}

// checkCopied checks the rest of an int4 conversion: the report names as
// many tensors as there are targets, every tensor that is not quantized is
// copied bit for bit, and with quantHead no lm_head.weight is written.
func checkCopied(t *testing.T, src *spark.Model, dst *safetensors.Checkpoint, rep *Report, targets []Target, quantHead bool) {
	t.Helper()
	if len(rep.Tensors) != len(targets) {
		t.Errorf("report has %d tensors, want %d", len(rep.Tensors), len(targets))
	}
	for _, s := range src.Config.Tensors() {
		if s.Kind == spark.KindLinear || (s.Kind == spark.KindHead && quantHead) {
			continue
		}
		_, a, _ := src.Raw(s.Name)
		_, b, err := dst.Raw(s.Name)
		if err != nil || string(a) != string(b) {
			t.Errorf("%s not copied bit for bit (%v)", s.Name, err)
		}
	}
	if quantHead && dst.Has(spark.HeadName) {
		t.Error("lm_head.weight written with --quant-head")
	}
}

func readConfig(t *testing.T, dir string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// writeConfigOnly writes a model folder holding only a config.json derived
// from the tiny fixture's, with keys replaced: the checks run before any
// tensor is read.
func writeConfigOnly(t *testing.T, set map[string]any) string {
	t.Helper()
	cfg := map[string]any{}
	base := fixturestest.Tiny(t, false)
	data, _ := os.ReadFile(filepath.Join(base, "config.json"))
	json.Unmarshal(data, &cfg)
	for k, v := range set {
		cfg[k] = v
	}
	dir := filepath.Join(t.TempDir(), "odd")
	os.Mkdir(dir, 0o755)
	out, _ := json.Marshal(cfg)
	os.WriteFile(filepath.Join(dir, "config.json"), out, 0o644)
	return dir
}

// treeSums hashes every file of dir except the report.
func treeSums(t *testing.T, dir string) map[string]string {
	t.Helper()
	sums := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == ReportFile {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		h := sha256.Sum256(b)
		sums[e.Name()] = hex.EncodeToString(h[:])
	}
	return sums
}

// tensorBytes reads every tensor of a checkpoint folder.
func tensorBytes(t *testing.T, dir string) map[string]string {
	t.Helper()
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	out := map[string]string{}
	for _, n := range ck.Names() {
		_, b, _ := ck.Raw(n)
		out[n] = string(b)
	}
	return out
}

// rechoose is a chooser whose codes cannot be recomputed from the
// parameters (like a Hessian-based GPTQ): the writer calls Choose again.
type rechoose struct {
	RTN
	calls map[string]int
}

func (c rechoose) Choose(dst *quant.Int4Result, t Target, m quant.Matrix, group int, dt quant.ScaleDType) error {
	c.calls[t.Source]++
	return c.RTN.Choose(dst, t, m, group, dt)
}

func (rechoose) Recode(*quant.Int4Result, quant.Matrix) bool { return false }

// syntheticBF16 returns bf16 bits of an [n, k] matrix like the fixtures'
// linears: N(0, 0.02) with a few input columns scaled by 10-50.
func syntheticBF16(n, k int, seed uint64) []uint16 {
	rng := rand.New(rand.NewPCG(seed, 7))
	outlier := map[int]float64{}
	for len(outlier) < max(2, k/512) {
		outlier[rng.IntN(k)] = 10 + 40*rng.Float64()
	}
	w := make([]uint16, n*k)
	for i := range w {
		v := rng.NormFloat64() * 0.02
		if f, ok := outlier[i%k]; ok {
			v *= f
		}
		w[i] = uint16(math.Float32bits(float32(v)) >> 16)
	}
	return w
}

// cpuSeconds is this process's user+system CPU time: MB per CPU-second does
// not depend on how busy the shared machine is.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawPart returns the bytes of module.suffix, failing unless its dtype and
// shape are dt and shape (the test decoders' one way into a checkpoint).
func rawPart(t *testing.T, ck *safetensors.Checkpoint, module, suffix, dt string, shape ...int64) []byte {
	t.Helper()
	info, raw, err := ck.Raw(module + "." + suffix)
	if err != nil {
		t.Fatal(err)
	}
	if string(info.DType) != dt || !reflect.DeepEqual(info.Shape, shape) {
		t.Fatalf("%s.%s is %s%v, want %s%v", module, suffix, info.DType, info.Shape, dt, shape)
	}
	return raw
}
