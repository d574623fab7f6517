package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

var binPath string

// TestMain builds the real binary once; the tests run it as users do.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sparkconv-bin-")
	if err != nil {
		panic(err)
	}
	binPath = filepath.Join(dir, "sparkconv")
	if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
		os.Stderr.Write(out)
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run executes sparkconv and returns stdout, stderr and the exit status.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return runEnv(t, nil, args...)
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := run(t, args...)
	if code != 0 {
		t.Fatalf("sparkconv %s: exit %d\n%s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// tree hashes every file under dir (relative name -> sha256), skipping
// the report, whose timings and peak memory differ run to run.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	sums := map[string]string{}
	filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || e.Name() == "sparkconv-report.json" {
			return err
		}
		b, _ := os.ReadFile(p)
		h := sha256.Sum256(b)
		rel, _ := filepath.Rel(dir, p)
		sums[rel] = hex.EncodeToString(h[:])
		return nil
	})
	return sums
}

func equalTrees(t *testing.T, a, b map[string]string) {
	t.Helper()
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("trees differ in size: %d vs %d", len(a), len(b))
	}
	for k, v := range a {
		if b[k] != v {
			t.Errorf("%s differs between runs", k)
		}
	}
}

func TestFixtureAndW8A8Deterministic(t *testing.T) {
	dir := t.TempDir()
	m1, m2 := filepath.Join(dir, "m1"), filepath.Join(dir, "m2")
	mustRun(t, "fixture", "--preset", "tiny", "--out", m1, "--seed", "7")
	mustRun(t, "fixture", "--preset", "tiny", "--out", m2, "--seed", "7", "--shards", "1")
	equalTrees(t, tree(t, m1), tree(t, m2))

	o1, o2 := filepath.Join(dir, "o1"), filepath.Join(dir, "o2")
	out := mustRun(t, "--json", "w8a8", "--model", m1, "--out", o1, "--max-shard-size", "2MB", "--tokens", "1024")
	var rep struct {
		Files  []string `json:"files"`
		Totals struct {
			Quantized int     `json:"quantized_tensors"`
			MinSNR    float64 `json:"min_snr_db"`
		} `json:"totals"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	if rep.Totals.Quantized != 20 || rep.Totals.MinSNR < 20 || len(rep.Files) < 3 {
		t.Errorf("report: %+v", rep)
	}
	mustRun(t, "w8a8", "--model", m1, "--out", o2, "--max-shard-size", "2MB", "--tokens", "1024")
	equalTrees(t, tree(t, o1), tree(t, o2))
}

func TestNoOverwriteAndExitCodes(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "m")
	mustRun(t, "fixture", "--preset", "tiny", "--out", m)
	before := tree(t, m)
	_, errOut, code := run(t, "fixture", "--preset", "tiny", "--out", m, "--seed", "2")
	if code != 1 || !strings.Contains(errOut, "already exists") {
		t.Errorf("overwrite: exit %d, %s", code, errOut)
	}
	equalTrees(t, before, tree(t, m))
	if _, errOut, code := run(t, "fixture", "--preset", "huge", "--out", filepath.Join(dir, "x")); code != 2 || !strings.Contains(errOut, "--preset") {
		t.Errorf("bad preset: exit %d, %s", code, errOut)
	}
	if _, _, code := run(t, "w8a8", "--nope"); code != 2 {
		t.Errorf("unknown flag: exit %d", code)
	}
	// A corrupt input names the file and leaves no output.
	os.WriteFile(filepath.Join(m, "model.safetensors"), []byte("garbage!"), 0o644)
	_, errOut, code = run(t, "w8a8", "--model", m, "--out", filepath.Join(dir, "o"))
	if code != 1 || !strings.Contains(errOut, "model.safetensors") {
		t.Errorf("corrupt input: exit %d, %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "o")); !os.IsNotExist(err) {
		t.Error("output written for a corrupt input")
	}
}

// TestInterruptLeavesNothing sends SIGINT while the output is being
// written: the command exits 130 and leaves neither output nor temp folder.
func TestInterruptLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("writes the small fixture")
	}
	dir := t.TempDir()
	target := filepath.Join(dir, "m")
	for attempt := 0; attempt < 3; attempt++ {
		cmd := exec.Command(binPath, "fixture", "--preset", "small", "--out", target)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until the temporary folder holds a safetensors file.
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			m, _ := filepath.Glob(filepath.Join(dir, ".m.sparkconv-tmp-*", "model.safetensors"))
			if len(m) > 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGINT)
		err := cmd.Wait()
		var ee *exec.ExitError
		if err == nil {
			os.RemoveAll(target) // finished before the signal; try again
			continue
		}
		if !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Fatalf("exit after SIGINT: %v", err)
		}
		if msg := stderr.String(); !strings.Contains(msg, "interrupted") || strings.Contains(msg, "context canceled") || strings.Contains(msg, "sparkconv-tmp") {
			t.Errorf("message after SIGINT: %q", msg)
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) != 0 {
			t.Fatalf("left behind after SIGINT: %v", entries)
		}
		return
	}
	t.Skip("the fixture finished before SIGINT three times")
}

func TestInspect(t *testing.T) {
	m := filepath.Join(t.TempDir(), "m")
	mustRun(t, "fixture", "--preset", "tiny", "--out", m, "--untied", "--shards", "2")
	var got struct {
		Plan struct {
			LayerTypeMap string `json:"layer_type_map"`
			Params       struct {
				Total int64 `json:"total"`
				Head  int64 `json:"head"`
			} `json:"params"`
			KVCache struct {
				PerToken int64 `json:"bytes_per_token_flat"`
				Hybrid   int64 `json:"hybrid_bytes"`
			} `json:"kv_cache"`
		} `json:"plan"`
	}
	out := mustRun(t, "--json", "inspect", "--model", m, "--max-model-len", "100")
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	p := got.Plan
	// tiny: 4 layers sssf, kv 2 x 64, window 16 -> sliding layers hold 15 entries.
	if p.LayerTypeMap != "sssf" || p.Params.Head != 512*256 || p.KVCache.PerToken != 4*2*2*64*2 || p.KVCache.Hybrid != 2*2*64*2*(3*15+100) {
		t.Errorf("plan %+v", p)
	}
	text := mustRun(t, "inspect", "--model", m)
	for _, want := range []string{"layer types sssf", "RoPE tables", "w4a8", "hybrid"} {
		if !strings.Contains(text, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, text)
		}
	}
	if _, errOut, code := run(t, "inspect", "--model", t.TempDir()); code != 1 || !strings.Contains(errOut, "config.json") {
		t.Errorf("empty folder: exit %d %s", code, errOut)
	}
}

// TestInterruptStopsAnyCommand: a command blocked where it does not look
// at the context (tokenize waiting on stdin) still exits 130 after SIGINT.
func TestInterruptStopsAnyCommand(t *testing.T) {
	cmd := exec.Command(binPath, "tokenize", "--tokenizer", "../../testdata/tokenizers/llama2/tokenizer.json")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	cmd.Process.Signal(syscall.SIGINT)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("exit after SIGINT: %v", err)
	}
	if d := time.Since(start); d > interruptGrace+3*time.Second {
		t.Errorf("took %v to stop", d)
	}
}
