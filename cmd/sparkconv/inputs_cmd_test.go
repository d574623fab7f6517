package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tinyModel generates the tiny fixture once per test into a temp folder.
func tinyModel(t *testing.T) string {
	t.Helper()
	m := filepath.Join(t.TempDir(), "m")
	mustRun(t, "fixture", "--preset", "tiny", "--out", m)
	return m
}

// copyDir copies the regular files of src into a new folder dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	os.MkdirAll(dst, 0o755)
	entries, _ := os.ReadDir(src)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644)
	}
}

// TestOutIsInputRefused: the case that once overwrote the bf16 source.
func TestOutIsInputRefused(t *testing.T) {
	m := tinyModel(t)
	before := tree(t, m)
	for _, out := range []string{m, filepath.Join(m, "q"), filepath.Dir(m)} {
		for _, cmd := range [][]string{
			{"w8a8", "--model", m, "--out", out, "--force"},
			{"w4a16", "--model", m, "--out", out, "--force", "--quant-head"},
			{"export-onnx", "--model", m, "--out", out, "--force"},
			{"calibrate", "--model", m, "--samples", "../../corpus/calib.txt", "--out", out, "--force"},
		} {
			_, errOut, code := run(t, cmd...)
			if code != 2 || !strings.Contains(errOut, "input") {
				t.Errorf("%s: exit %d: %s", strings.Join(cmd, " "), code, errOut)
			}
		}
	}
	if _, errOut, code := run(t, "forward", "--model", m, "--ids", "1,2", "--dump", filepath.Join(m, "model.safetensors"), "--force"); code != 2 {
		t.Errorf("forward --dump into the model: exit %d: %s", code, errOut)
	}
	equalTrees(t, before, tree(t, m))
}

// hfCache moves the model folder m's files into a Hugging Face cache
// layout: blobs/ holds them, snapshots/abc123/ links to them.
func hfCache(t *testing.T, m string) (snap, blobs string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "models--x--spark")
	snap, blobs = filepath.Join(root, "snapshots", "abc123"), filepath.Join(root, "blobs")
	os.MkdirAll(snap, 0o755)
	os.MkdirAll(blobs, 0o755)
	entries, _ := os.ReadDir(m)
	for i, e := range entries {
		blob := filepath.Join(blobs, strings.Repeat("f", i+1))
		os.Rename(filepath.Join(m, e.Name()), blob)
		os.Symlink(filepath.Join("..", "..", "blobs", filepath.Base(blob)), filepath.Join(snap, e.Name()))
	}
	return snap, blobs
}

// TestHFCacheSnapshot: a snapshot folder of symlinks into ../../blobs
// (the Hugging Face cache) converts and inspects like a plain folder.
func TestHFCacheSnapshot(t *testing.T) {
	snap, _ := hfCache(t, tinyModel(t))
	mustRun(t, "inspect", "--model", snap)
	out := filepath.Join(t.TempDir(), "o")
	mustRun(t, "w8a8", "--model", snap, "--out", out, "--rtn")
	if st, err := os.Lstat(filepath.Join(out, "tokenizer.json")); err != nil || !st.Mode().IsRegular() {
		t.Errorf("tokenizer.json in the output: %v", err)
	}
}

// TestHostileInputsNeverHang: a FIFO or /dev/zero in place of an input
// file gives a clean error naming it, at once, with exit 1.
func TestHostileInputsNeverHang(t *testing.T) {
	m := tinyModel(t)
	for _, c := range []struct {
		file string
		make func(p string)
		cmd  []string
		want string
	}{
		{"config.json", func(p string) { syscall.Mkfifo(p, 0o644) }, []string{"inspect", "--model"}, "FIFO"},
		{"config.json", func(p string) { os.Symlink("/dev/zero", p) }, []string{"w8a8", "--out", "OUT", "--model"}, "device"},
		{"model.safetensors", func(p string) { syscall.Mkfifo(p, 0o644) }, []string{"forward", "--ids", "1", "--model"}, "FIFO"},
		{"tokenizer.json", func(p string) { os.Symlink("/dev/zero", p) }, []string{"forward", "--text", "hi", "--model"}, "device"},
		{"tokenizer.json", func(p string) { syscall.Mkfifo(p, 0o644) }, []string{"w8a8", "--out", "OUT", "--model"}, "FIFO"},
	} {
		dir := filepath.Join(t.TempDir(), "m")
		copyDir(t, m, dir)
		p := filepath.Join(dir, c.file)
		os.Remove(p)
		c.make(p)
		args := append([]string{}, c.cmd...)
		for i, a := range args {
			if a == "OUT" {
				args[i] = filepath.Join(t.TempDir(), "out")
			}
		}
		args = append(args, dir)
		start := time.Now()
		_, errOut, code := run(t, args...)
		if code != 1 || !strings.Contains(errOut, p) || !strings.Contains(errOut, c.want) {
			t.Errorf("%s as %s: exit %d: %s", c.file, c.want, code, errOut)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s as %s: took %v", c.file, c.want, d)
		}
	}
}

// TestFIFOGraphNeverHangs: a FIFO in place of an .onnx file or an
// export's manifest.json is refused at once.
func TestFIFOGraphNeverHangs(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "model.onnx")
	syscall.Mkfifo(fifo, 0o644)
	syscall.Mkfifo(filepath.Join(dir, "manifest.json"), 0o644)
	for _, args := range [][]string{
		{"lint", fifo},
		{"sanitize", fifo, "-o", filepath.Join(dir, "out.onnx")},
		{"verify", "--model", dir, "--export", dir},
	} {
		start := time.Now()
		_, errOut, code := run(t, args...)
		if code != 1 || !strings.Contains(errOut, "FIFO") {
			t.Errorf("%v: exit %d: %s", args, code, errOut)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%v: took %v", args, d)
		}
	}
}

// TestInspectConfigOnly: a folder holding only config.json is planned
// from it, and says so; absurd sizes are refused by field.
func TestInspectConfigOnly(t *testing.T) {
	m := tinyModel(t)
	dir := t.TempDir()
	b, _ := os.ReadFile(filepath.Join(m, "config.json"))
	os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
	out, errOut, code := run(t, "--json", "inspect", "--model", dir, "--max-model-len", "100")
	var got struct {
		Weights string `json:"weights"`
		Plan    struct {
			KVCache struct {
				Hybrid int64 `json:"hybrid_bytes"`
			} `json:"kv_cache"`
		} `json:"plan"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Weights != "absent" || got.Plan.KVCache.Hybrid != 2*2*64*2*(3*15+100) {
		t.Errorf("config-only inspect: exit %d %s %s", code, out, errOut)
	}
	_, errOut, _ = run(t, "inspect", "--model", dir)
	if !strings.Contains(errOut, "planned from config.json alone") {
		t.Errorf("human inspect does not say it planned from the config: %s", errOut)
	}
	var cfg map[string]any
	json.Unmarshal(b, &cfg)
	for field, v := range map[string]any{"max_position_embeddings": 1 << 62, "num_hidden_layers": 1e9} {
		bad := map[string]any{}
		for k, x := range cfg {
			bad[k] = x
		}
		bad[field] = v
		delete(bad, "layer_types")
		data, _ := json.Marshal(bad)
		os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644)
		if _, errOut, code := run(t, "inspect", "--model", dir); code != 1 || !strings.Contains(errOut, "field "+field) {
			t.Errorf("%s = %v: exit %d: %s", field, v, code, errOut)
		}
	}
}
