package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sparkconv/dtype"
	"sparkconv/fixtures/fixturestest"
	"sparkconv/outdir"
	"sparkconv/safetensors"
)

// runWithin is run with a deadline: a command still running after limit
// is killed and the test fails (a hang, not a slow run).
func runWithin(t *testing.T, limit time.Duration, args ...string) (string, string, int) {
	t.Helper()
	return runCmd(t, limit, nil, args...)
}

// expect runs args and checks the exit status and that stderr holds every
// one of want.
func expect(t *testing.T, code int, want []string, args ...string) string {
	t.Helper()
	_, errOut, got := runWithin(t, 2*time.Minute, args...)
	if got != code {
		t.Errorf("sparkconv %s: exit %d, want %d\n%s", strings.Join(args, " "), got, code, errOut)
	}
	for _, w := range want {
		if !strings.Contains(errOut, w) {
			t.Errorf("sparkconv %s: stderr lacks %q:\n%s", strings.Join(args, " "), w, errOut)
		}
	}
	return errOut
}

// TestEvalWritesNoInput: rows 1-3 and 16 of issue 21. eval's --base-logits
// and --report never name a file of --base or --model (exit 2, with
// --force too, nothing touched); --force replaces only a base file or
// report sparkconv wrote (a user's file of the same name is refused by
// name) and does replace those, where it once failed with "file exists".
func TestEvalWritesNoInput(t *testing.T) {
	m := tinyModel(t)
	dir := t.TempDir()
	base, build := filepath.Join(dir, "m3"), filepath.Join(dir, "b")
	copyDir(t, m, base)
	mustRun(t, "w8a8", "--model", m, "--out", build, "--rtn")
	before := map[string]map[string]string{base: tree(t, base), build: tree(t, build)}
	ev := func(extra ...string) []string {
		return append([]string{"eval", "--base", base, "--model", build, "--ctx", "64", "--greedy", "0"}, extra...)
	}
	for _, p := range []string{filepath.Join(base, "model.safetensors"), filepath.Join(build, "model.safetensors"), filepath.Join(base, "tokenizer.json"), filepath.Join(base, "new.st")} {
		expect(t, 2, []string{"--base-logits", "overlaps an input", p}, ev("--base-logits", p, "--force")...)
		expect(t, 2, []string{"--report", "overlaps an input"}, ev("--report", p, "--force")...)
	}
	for d, b := range before {
		equalTrees(t, b, tree(t, d))
	}
	notes := filepath.Join(dir, "notes.txt")
	os.WriteFile(notes, []byte("the user's own file"), 0o644)
	expect(t, 1, []string{notes, "not written by sparkconv", "--force replaces only what sparkconv itself wrote"}, ev("--base-logits", notes, "--force")...)
	expect(t, 1, []string{notes, "not written by sparkconv"}, ev("--report", notes, "--force")...)
	expect(t, 2, []string{"overlaps an input"}, ev("--report", notes, "--base-logits", notes)...)
	if b, _ := os.ReadFile(notes); string(b) != "the user's own file" {
		t.Errorf("notes.txt changed: %q", b)
	}
	bl, rep := filepath.Join(dir, "base.st"), filepath.Join(dir, "r.html")
	mustRun(t, ev("--base-logits", bl, "--report", rep)...)
	expect(t, 1, []string{rep, "already exists"}, ev("--base-logits", bl, "--report", rep)...)
	mustRun(t, ev("--base-logits", bl, "--report", rep, "--force")...) // recomputes the base, replaces the report
	if b, _ := os.ReadFile(rep); !bytes.HasPrefix(b, []byte("<!DOCTYPE html>")) {
		t.Errorf("report after --force: %.40q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 5 {
		t.Errorf("left in %s: %v", dir, entries)
	}
}

// TestForceReplacesOnlySparkconvOutputs: row 4. --out --force refuses, by
// name, a plain file and a folder sparkconv did not write; forward --dump
// and sanitize -o refuse a file they did not write and an input; qnn-bundle's
// --out is checked against its inputs. A sparkconv output is replaced.
func TestForceReplacesOnlySparkconvOutputs(t *testing.T) {
	m := tinyModel(t)
	dir := t.TempDir()
	plain := filepath.Join(dir, "f")
	os.WriteFile(plain, []byte("mine"), 0o644)
	foreign := filepath.Join(dir, "hf-model")
	copyDir(t, m, foreign)
	os.Remove(filepath.Join(foreign, outdir.MarkerName)) // a Hugging Face folder has none
	os.WriteFile(filepath.Join(foreign, "config.json"), []byte(`{"model_type": "other"}`), 0o644)
	before := tree(t, foreign)
	for _, out := range []string{plain, foreign} {
		for _, cmd := range [][]string{
			{"w8a8", "--model", m, "--out", out, "--rtn", "--force"},
			{"export-onnx", "--model", m, "--out", out, "--force"},
			{"fixture", "--out", out, "--force"},
			{"calibrate", "--model", m, "--samples", "../../corpus/calib.txt", "--out", out, "--force"},
		} {
			expect(t, 1, []string{out, "--force replaces only what sparkconv itself wrote"}, cmd...)
		}
		expect(t, 1, []string{out, "not written by sparkconv"}[:1], "forward", "--model", m, "--ids", "1,2", "--dump", out, "--force")
	}
	if b, _ := os.ReadFile(plain); string(b) != "mine" {
		t.Errorf("the plain file changed: %q", b)
	}
	equalTrees(t, before, tree(t, foreign))
	build := filepath.Join(dir, "b")
	mustRun(t, "w8a8", "--model", m, "--out", build, "--rtn")
	mustRun(t, "w4a16", "--model", m, "--out", build, "--rtn", "--force") // a build replaces a build
	corpus, _ := os.ReadFile("../../corpus/calib.txt")
	inside := filepath.Join(build, "samples.txt")
	os.WriteFile(inside, corpus, 0o644)
	expect(t, 2, []string{"contains the input " + inside}, "w8a8", "--model", m, "--out", build, "--samples", inside, "--force")
	fix := filepath.Join(dir, "fx")
	mustRun(t, "fixture", "--out", fix)
	mustRun(t, "fixture", "--out", fix, "--preset", "small", "--force") // and a fixture a fixture
	// but a build replaces no fixture: a fixture is a model
	expect(t, 1, []string{fix, "not written by sparkconv"}, "w8a8", "--model", m, "--out", fix, "--rtn", "--force")
	dump := filepath.Join(dir, "d.safetensors")
	mustRun(t, "forward", "--model", m, "--ids", "1,2", "--dump", dump)
	mustRun(t, "forward", "--model", m, "--ids", "1,2,3", "--dump", dump, "--force")
	ex := filepath.Join(dir, "ex")
	mustRun(t, "export-onnx", "--model", m, "--out", ex)
	exBefore := tree(t, ex)
	graph := filepath.Join(ex, "layer_00.onnx")
	expect(t, 2, []string{"overlaps an input"}, "sanitize", graph, "-o", graph, "--force")
	san := filepath.Join(dir, "s.onnx")
	mustRun(t, "sanitize", graph, "-o", san)
	mustRun(t, "sanitize", graph, "-o", san, "--force") // its own output
	expect(t, 1, []string{plain, "not written by sparkconv"}, "sanitize", graph, "-o", plain, "--force")
	for _, out := range []string{m, ex} {
		expect(t, 2, []string{"overlaps an input"}, "qnn-bundle", "--model", m, "--export", ex, "--out", out, "--force")
	}
	equalTrees(t, exBefore, tree(t, ex))
}

// TestPlanCPUInfoBounded: rows 5-7. --cpuinfo goes through infile: a
// device, a FIFO and a 1 GB file are refused at once by name, never read.
func TestPlanCPUInfoBounded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "p")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "c")
	f, _ := os.Create(big)
	f.Truncate(1 << 30)
	f.Close()
	for _, c := range []struct{ path, want string }{
		{"/dev/zero", "/dev/zero: a device, not a regular file"},
		{fifo, "a FIFO (named pipe), not a regular file"},
		{big, "1073741824 bytes, larger than the 16 MiB"},
		{dir, "a folder, not a file"},
	} {
		start := time.Now()
		_, errOut, code := runWithin(t, 20*time.Second, "plan", "--cpuinfo", c.path)
		if code != 1 || !strings.Contains(errOut, c.want) || time.Since(start) > 10*time.Second {
			t.Errorf("plan --cpuinfo %s: exit %d after %s: %s", c.path, code, time.Since(start), errOut)
		}
	}
}

// TestForwardOverflowRefused: row 8. A down_proj of bf16 max overflows
// the forward: the error names the layer and the point, never NaN logits
// with exit 0.
func TestForwardOverflowRefused(t *testing.T) {
	m := tinyModel(t)
	pokeTensor(t, m, "model.layers.0.mlp.down_proj.weight", []byte{0x7f, 0x7f})
	expect(t, 1, []string{"layer 0: NaN in mlp_out at row 0", "overflowed float32"}, "forward", "--model", m, "--ids", "1,2,3")
	expect(t, 1, []string{"layer 0", "overflowed float32"}, "eval", "--base", m, "--model", m, "--ctx", "64", "--greedy", "0")
	// The calibrated builds run the layer's stages themselves: the same
	// refusal, before a Hessian or a report holds NaN, and nothing written
	// (gptq refuses earlier: no float16 scale holds such a weight).
	for b, want := range map[string][]string{
		"gptq":  {"model.layers.0.mlp.down_proj.weight: its largest weight, 3.39e+38", "beyond float16's 65504"},
		"w8a8":  {"layer 0: ", "overflowed float32"},
		"w4a16": {"layer 0: ", "overflowed float32"},
	} {
		out := filepath.Join(t.TempDir(), b)
		expect(t, 1, want, b, "--model", m, "--out", out)
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%s: %s written after the overflow", b, out)
		}
	}
}

// editConfig rewrites dir/config.json with edit applied to its object.
func editConfig(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	edit(c)
	b, _ = json.MarshalIndent(c, "", "  ")
	os.WriteFile(p, b, 0o644)
}

// TestMathConfigRefused: rows 9 and 10. Config fields that change the
// math and are not implemented are refused by inspect, the builds, forward
// and export-onnx, naming the field and the value; nothing is written.
func TestMathConfigRefused(t *testing.T) {
	m := tinyModel(t)
	for _, c := range []struct {
		name string
		edit func(map[string]any)
		want []string
	}{
		{"yarn", func(c map[string]any) { c["rope_scaling"] = map[string]any{"rope_type": "yarn", "factor": 4} }, []string{`field rope_scaling = {"factor":4,"rope_type":"yarn"}`}},
		{"any word", func(c map[string]any) { c["rope_scaling"] = map[string]any{"type": "word"} }, []string{`field rope_scaling = {"type":"word"}`}},
		{"ids and dtype", func(c map[string]any) { c["bos_token_id"], c["eos_token_id"], c["torch_dtype"] = 99999, -1, "float8" }, []string{
			"field bos_token_id = 99999: token id 99999 is outside the vocabulary [0, 512)",
			"field eos_token_id = -1: token id -1 is outside the vocabulary [0, 512)",
			`field torch_dtype = "float8", want one of bfloat16, float16, float32`}},
		{"act", func(c map[string]any) { c["hidden_act"] = "relu2" }, []string{`field hidden_act = "relu2"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := filepath.Join(t.TempDir(), "m")
			copyDir(t, m, d)
			editConfig(t, d, c.edit)
			out := filepath.Join(t.TempDir(), "o")
			for _, cmd := range [][]string{
				{"inspect", "--model", d},
				{"w8a8", "--model", d, "--out", out, "--rtn"},
				{"forward", "--model", d, "--ids", "1,2,3"},
				{"export-onnx", "--model", d, "--out", out},
			} {
				expect(t, 1, c.want, cmd...)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%s written", out)
			}
		})
	}
}

// rewriteCheckpoint writes dst/model.safetensors from src's tensors, with
// the named ones dropped, given another shape or another dtype of the
// same element size.
func rewriteCheckpoint(t *testing.T, src, dst string, drop []string, shape map[string][]int64, dt map[string]string) {
	t.Helper()
	fixturestest.Rewrite(t, src, dst, func(ts *safetensors.Tensor, _ []byte) bool {
		if s, ok := shape[ts.Name]; ok {
			ts.Shape = s
		}
		if d, ok := dt[ts.Name]; ok {
			ts.DType = dtype.DType(d)
		}
		return !contains(drop, ts.Name)
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestCheckpointProblemsAllNamed: rows 11 and 12. A deleted linear is
// named, beside a transposed and a wrongly typed one, with the count kept
// as a summary.
func TestCheckpointProblemsAllNamed(t *testing.T) {
	m := tinyModel(t)
	one, three := filepath.Join(t.TempDir(), "d"), filepath.Join(t.TempDir(), "d2")
	os.MkdirAll(one, 0o755)
	os.MkdirAll(three, 0o755)
	up, down, o := "model.layers.1.mlp.up_proj.weight", "model.layers.2.mlp.down_proj.weight", "model.layers.0.self_attn.o_proj.weight"
	rewriteCheckpoint(t, m, one, []string{up}, nil, nil)
	rewriteCheckpoint(t, m, three, []string{up}, map[string][]int64{down: {768, 256}}, map[string]string{o: "I16"})
	missing := "missing tensor " + up + ", expected shape [768 256]"
	summary := "num_hidden_layers = 4 needs at least 34 tensors, the checkpoint holds 33"
	for _, cmd := range []string{"w8a8", "export-onnx"} {
		expect(t, 1, []string{summary, "(1 problem)", missing}, cmd, "--model", one, "--out", filepath.Join(t.TempDir(), "o"))
		expect(t, 1, []string{summary, "(3 problems)", missing,
			"tensor " + down + " has shape [768 256], expected [256 768]",
			"tensor " + o + " has dtype I16, expected BF16, F16 or F32"}, cmd, "--model", three, "--out", filepath.Join(t.TempDir(), "o"))
	}
}

// TestExportReadersCheckManifest: rows 14 and 15. A byte flipped in a
// graph (in its weights, or at offset 5000 where ONNX Runtime's parser
// chokes) is refused by eval --export, qnn-bundle and lint of the folder
// with verify's manifest message naming the file, before ONNX Runtime
// sees it.
func TestExportReadersCheckManifest(t *testing.T) {
	m := tinyModel(t)
	for _, c := range []struct {
		file string
		off  int64
	}{{"layer_02.onnx", 3000000}, {"layer_01.onnx", 5000}} {
		ex := filepath.Join(t.TempDir(), "ex")
		mustRun(t, "export-onnx", "--model", m, "--out", ex)
		p := filepath.Join(ex, c.file)
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		f.ReadAt(b, c.off)
		f.WriteAt([]byte{b[0] ^ 0xff}, c.off)
		f.Close()
		want := []string{"1 files do not match their manifest", p + ": sha256"}
		for _, cmd := range [][]string{
			{"eval", "--base", m, "--export", ex, "--ctx", "32", "--greedy", "0"},
			{"qnn-bundle", "--model", m, "--export", ex, "--out", filepath.Join(t.TempDir(), "q")},
			{"lint", ex},
			{"verify", "--model", m, "--export", ex},
		} {
			expect(t, 1, want, cmd...)
		}
	}
}

// TestCalibrationTextRules: row 13 and the smaller calibrate item. qnn-
// bundle refuses text shorter than the export's context with the numbers
// (--allow-short: a warning with the same numbers), and calibrate refuses
// the degenerate text gptq refuses, in the same words.
func TestCalibrationTextRules(t *testing.T) {
	requireORT(t)
	m := tinyModel(t)
	dir := t.TempDir()
	ex := filepath.Join(dir, "ex")
	mustRun(t, "export-onnx", "--model", m, "--out", ex)
	short := filepath.Join(dir, "short.txt")
	os.WriteFile(short, []byte("hello world\n"), 0o644)
	corpus, _ := os.ReadFile("../../corpus/calib.txt")
	varied := filepath.Join(dir, "varied.txt")
	os.WriteFile(varied, corpus[:700], 0o644)
	q := filepath.Join(dir, "q")
	expect(t, 1, []string{"the calibration text gives 7 tokens, fewer than the export's context of 1024: positions 7..1023 are never observed",
		"never passes the sliding window of 16"}, "qnn-bundle", "--model", m, "--export", ex, "--out", q, "--samples", short)
	errOut := expect(t, 1, []string{"fewer than the export's context of 1024", "passes the sliding window of 16", "--allow-short"}, "qnn-bundle", "--model", m, "--export", ex, "--out", q, "--samples", varied)
	if _, err := os.Stat(q); err == nil {
		t.Errorf("refused bundle written: %s", errOut)
	}
	expect(t, 0, []string{"warning: " + varied + ": the calibration text gives", "the ranges of those positions are extrapolated"}, "qnn-bundle", "--model", m, "--export", ex, "--out", q, "--samples", varied, "--allow-short")
	rep := filepath.Join(dir, "rep.txt")
	os.WriteFile(rep, []byte(strings.Repeat("a ", 2000)), 0o644)
	rule := "distinct ids (at least 64 needed): text this repetitive calibrates nothing"
	expect(t, 1, []string{rule}, "calibrate", "--model", m, "--samples", rep, "--out", filepath.Join(dir, "c"))
	expect(t, 1, []string{rule}, "gptq", "--model", m, "--samples", rep, "--out", filepath.Join(dir, "g"))
	expect(t, 1, []string{rule}, "w8a8", "--model", m, "--samples", rep, "--out", filepath.Join(dir, "w8"))
	expect(t, 1, []string{rule}, "w4a16", "--model", m, "--samples", rep, "--out", filepath.Join(dir, "w4"))
	expect(t, 1, []string{rep + ": the 1024 calibration tokens hold only", rule}, "qnn-bundle", "--model", m, "--export", ex, "--out", filepath.Join(dir, "q2"), "--samples", rep)
}

// TestNoDoneLineBeforeError: the smaller item. A build that fails while
// writing prints its error, not a "done in" line first.
func TestNoDoneLineBeforeError(t *testing.T) {
	m := tinyModel(t)
	pokeTensor(t, m, "model.layers.2.mlp.up_proj.weight", []byte{0xc0, 0x7f}) // bf16 NaN
	errOut := expect(t, 1, []string{"model.layers.2.mlp.up_proj.weight", "NaN"}, "w8a8", "--model", m, "--out", filepath.Join(t.TempDir(), "o"), "--rtn")
	if strings.Contains(errOut, "done in") {
		t.Errorf("a done line before the error:\n%s", errOut)
	}
}
