package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sparkconv/onnxgraph"
	"sparkconv/onnxio"
	"sparkconv/ortrun"
	"sparkconv/qnn"
)

const goldenTied = "../../testdata/golden/spark-mini-tied"

// requireORT skips a test that runs ONNX Runtime when the library is
// missing, unless $SPARKCONV_REQUIRE_ORT is set (CI), where it fails.
func requireORT(t *testing.T) {
	t.Helper()
	if _, err := ortrun.FindORTLib(""); err != nil {
		if os.Getenv("SPARKCONV_REQUIRE_ORT") != "" {
			t.Fatalf("SPARKCONV_REQUIRE_ORT is set: %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
}

func TestExportONNXCommand(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	out := mustRun(t, "--json", "export-onnx", "--model", goldenTied, "--out", a, "--context", "48", "--granularity", "block", "--dtype", "fp16")
	var rep struct {
		Files []struct {
			File, Kind, SHA256 string
			Bytes              int64
		} `json:"files"`
		Bytes    int64   `json:"bytes"`
		MBPerSec float64 `json:"mb_per_s"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if len(rep.Files) != 4 || rep.Files[1].File != "block_00.onnx" || rep.Files[1].Kind != "block" || rep.Bytes == 0 || rep.MBPerSec <= 0 {
		t.Fatalf("report: %+v", rep)
	}
	mustRun(t, "export-onnx", "--model", goldenTied, "--out", b, "--context", "48", "--granularity", "block", "--dtype", "fp16")
	equalTrees(t, tree(t, a), tree(t, b))

	// No overwrite without --force; --force replaces.
	before := tree(t, a)
	if _, errOut, code := run(t, "export-onnx", "--model", goldenTied, "--out", a); code != 1 || !strings.Contains(errOut, "already exists") {
		t.Errorf("overwrite: exit %d, %s", code, errOut)
	}
	equalTrees(t, before, tree(t, a))
	mustRun(t, "export-onnx", "--model", goldenTied, "--out", a, "--force")
	if _, err := os.Stat(filepath.Join(a, "layer_07.onnx")); err != nil {
		t.Errorf("--force did not replace the export: %v", err)
	}
	for _, bad := range [][]string{
		{"--layers", "0-9"}, {"--dtype", "bf16"}, {"--layout", "spiral"}, {"--granularity", "block", "--layers", "0-1"}, {"--gelu", "relu"},
	} {
		args := append([]string{"export-onnx", "--model", goldenTied, "--out", filepath.Join(dir, "x")}, bad...)
		if _, errOut, code := run(t, args...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", bad, code, errOut)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
		t.Error("a refused export left its folder")
	}
}

func TestVerifyCommand(t *testing.T) {
	requireORT(t)
	dir := t.TempDir()
	good, tanh := filepath.Join(dir, "good"), filepath.Join(dir, "tanh")
	mustRun(t, "export-onnx", "--model", goldenTied, "--out", good, "--context", "24")
	out := mustRun(t, "--json", "verify", "--model", goldenTied, "--export", good, "--threads", "1")
	var rep onnxgraphReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if !rep.Pass || rep.Steps != 16 || len(rep.Graphs) != 10 || rep.Top1 != 16 {
		t.Fatalf("report: %+v", rep)
	}
	// A tanh-GELU export of an erf model is a different function: the
	// per-graph bar (100 dB) catches it (about 80 dB).
	mustRun(t, "export-onnx", "--model", goldenTied, "--out", tanh, "--context", "24", "--gelu", "tanh")
	stdout, _, code := run(t, "verify", "--model", goldenTied, "--export", tanh, "--threads", "1")
	if code != 1 || !strings.Contains(stdout, "FAIL: layer_") {
		t.Errorf("tanh export: exit %d\n%s", code, stdout)
	}
	// With --json, stdout is the one report document, pass false.
	stdout, _, code = run(t, "--json", "verify", "--model", goldenTied, "--export", tanh, "--threads", "1")
	var bad onnxgraphReport
	if err := json.Unmarshal([]byte(stdout), &bad); code != 1 || err != nil || bad.Pass {
		t.Errorf("tanh export --json: exit %d, %v, %+v", code, err, bad)
	}
	// A file that no longer matches its sha256 fails, even when the change
	// (the lowest mantissa byte of one weight) is numerically invisible.
	p := filepath.Join(good, "head.onnx")
	data, _ := os.ReadFile(p)
	data[len(data)/2&^3] ^= 1
	os.WriteFile(p, data, 0o644)
	if stdout, errOut, code := run(t, "verify", "--model", goldenTied, "--export", good, "--threads", "1"); code != 1 || !strings.Contains(errOut, "head.onnx: sha256") || strings.Contains(stdout, "PASS") {
		t.Errorf("tampered head: exit %d\n%s%s", code, stdout, errOut)
	}
	if _, errOut, code := run(t, "verify", "--model", goldenTied, "--export", good, "--ort-lib", filepath.Join(dir, "none.so")); code != 1 || !strings.Contains(errOut, "npm pack onnxruntime-node@1.30.0") {
		t.Errorf("missing --ort-lib: exit %d, %s", code, errOut)
	}
}

type onnxgraphReport struct {
	Pass   bool `json:"pass"`
	Steps  int  `json:"steps"`
	Top1   int  `json:"top1_agree"`
	Graphs []struct {
		File string `json:"file"`
		Pass bool   `json:"pass"`
	} `json:"graphs"`
}

// TestLintReadsStructure: the lint of export-onnx reads files with
// onnxgraph.ReadStructure (big weights' payload skipped); on a graph with
// QNN problems it must report exactly what a full read reports.
func TestLintReadsStructure(t *testing.T) {
	b := onnxgraph.New("bad", onnxgraph.Float32)
	x := b.Input("x", onnxgraph.Float32, 1, 4, 64)
	w := b.Float32s("w", []int64{64, 64}, make([]float32, 64*64)) // 16 KiB: skipped below
	y := b.Op("MatMul", []string{x, w})
	y = b.Op("Softmax", []string{y}, onnxgraph.AttrInt("axis", 1))
	y = b.Op("Reshape", []string{y, b.Int64s(1, 256)}, onnxgraph.AttrInt("allowzero", 1))
	b.OpTo("y", "Erf", []string{y})
	b.Output("y", onnxgraph.Float32, 1, 256)
	dir := t.TempDir()
	if _, err := b.WriteFile(dir, "bad.onnx", onnxio.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "bad.onnx")
	full, err := onnxio.ReadModelFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lean, err := onnxio.ReadStructure(path, 1024)
	if err != nil {
		t.Fatal(err)
	}
	want, got := qnn.Lint(full), qnn.Lint(lean)
	if len(want) < 3 || fmt.Sprint(want) != fmt.Sprint(got) {
		t.Fatalf("lint of the full model:\n%v\nlint of the structure:\n%v", want, got)
	}
}

// TestVerifyInterrupt: SIGINT stops verify within a second, exit 130, and
// no verdict is printed.
func TestVerifyInterrupt(t *testing.T) {
	requireORT(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "onnx")
	mustRun(t, "export-onnx", "--model", goldenTied, "--out", out, "--context", "1024")
	cmd := exec.Command(binPath, "verify", "--model", goldenTied, "--export", out, "--threads", "1", "--steps", "1000")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	sent := time.Now()
	cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	took := time.Since(sent)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 || took > time.Second || strings.Contains(stdout.String(), "PASS") {
		t.Errorf("after SIGINT: %v in %v\nstdout %s\nstderr %s", err, took, stdout.String(), stderr.String())
	}
}
