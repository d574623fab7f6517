package main

// The cases of issue 30 ("Hardening, third pass"), each as the command a
// careless user or a CI pipeline runs.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// markerName is outdir.MarkerName, spelled out so these tests build on
// the commit before it too.
const markerName = ".sparkconv-output"

// runEnv is run with extra environment variables (NAME=value).
func runEnv(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	return runCmd(t, 20*time.Minute, env, args...)
}

// runCmd runs sparkconv with extra environment variables and a deadline: a
// command still running after limit is killed and the test fails (a hang,
// not a slow run). It returns stdout, stderr and the exit status.
func runCmd(t *testing.T, limit time.Duration, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("sparkconv %s: still running after %s (killed)", strings.Join(args, " "), limit)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return stdout.String(), stderr.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), 0
}

// writeFile writes content to dir/name (dir created).
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestQNNBundleReadsAreInputs: cases 1 and 2. A bundle folder (a
// bundle.json that names sparkconv) holding the --held-out-samples text or
// ONNX Runtime's library, by --ort-lib or $SPARKCONV_ORT_LIB, is refused
// as --out --force before any work (exit 2), and the file is kept.
func TestQNNBundleReadsAreInputs(t *testing.T) {
	m := tinyModel(t)
	dir := t.TempDir()
	ex := filepath.Join(dir, "ex")
	mustRun(t, "export-onnx", "--model", m, "--out", ex)
	corpus, _ := os.ReadFile("../../corpus/calib.txt")
	for _, c := range []struct {
		name, file string
		flags, env []string
	}{
		{"held-out-samples", "h.txt", []string{"--held-out-samples", "Q/h.txt"}, nil},
		{"ort-lib", "lib.so", []string{"--ort-lib", "Q/lib.so"}, nil},
		{"SPARKCONV_ORT_LIB", "lib.so", nil, []string{"SPARKCONV_ORT_LIB=Q/lib.so"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := filepath.Join(t.TempDir(), "q")
			writeFile(t, q, "bundle.json", `{"format": "sparkconv-qnn-bundle", "version": 1}`)
			kept := writeFile(t, q, c.file, string(corpus))
			fix := func(list []string) []string {
				var out []string
				for _, s := range list {
					out = append(out, strings.ReplaceAll(s, "Q/", q+"/"))
				}
				return out
			}
			args := append([]string{"qnn-bundle", "--model", m, "--export", ex, "--out", q, "--force"}, fix(c.flags)...)
			_, errOut, code := runEnv(t, fix(c.env), args...)
			if code != 2 || !strings.Contains(errOut, "output overlaps an input: "+q+" contains the input "+kept) {
				t.Errorf("exit %d: %s", code, errOut)
			}
			if b, _ := os.ReadFile(kept); !bytes.Equal(b, corpus) {
				t.Errorf("%s deleted or changed", kept)
			}
		})
	}
}

// TestSavedJSONOwnsNothing: case 3. A folder holding a saved --json
// document ("tool": "sparkconv") is not sparkconv's output: --force
// refuses it by name and the user's files stay; an output sparkconv wrote
// carries the marker, naming its command, and is replaced.
func TestSavedJSONOwnsNothing(t *testing.T) {
	m := tinyModel(t)
	dir := t.TempDir()
	proj := filepath.Join(dir, "proj")
	notes := writeFile(t, proj, "notes.txt", "notes")
	doc := mustRun(t, "--json", "w8a8", "--rtn", "--model", m, "--out", filepath.Join(dir, "b"))
	writeFile(t, proj, "result.json", doc)
	for _, cmd := range [][]string{
		{"export-onnx", "--model", m, "--out", proj, "--force"},
		{"w8a8", "--rtn", "--model", m, "--out", proj, "--force"},
		{"calibrate", "--model", m, "--samples", "../../corpus/calib.txt", "--out", proj, "--force"},
		{"fixture", "--out", proj, "--force"},
	} {
		expect(t, 1, []string{proj + " exists and is not written by sparkconv (it holds no " + markerName + " marker"}, cmd...)
	}
	if b, _ := os.ReadFile(notes); string(b) != "notes" {
		t.Fatalf("notes.txt: %q", b)
	}
	// The marker: one per output folder, naming the command.
	var mk struct{ Format, Command string }
	b, err := os.ReadFile(filepath.Join(dir, "b", markerName))
	if err != nil || json.Unmarshal(b, &mk) != nil || mk.Format != "sparkconv-output/1" || mk.Command != "w8a8" {
		t.Fatalf("marker %q: %v", b, err)
	}
	mustRun(t, "export-onnx", "--model", m, "--out", filepath.Join(dir, "b"), "--force")
	b, _ = os.ReadFile(filepath.Join(dir, "b", markerName))
	if !strings.Contains(string(b), `"command":"export-onnx"`) {
		t.Errorf("marker after the replace: %s", b)
	}
}

// TestHFCacheBlobsAreInputs: case 4. In a Hugging Face cache whose blobs
// folder holds a saved JSON document, an output that is the blobs folder
// is refused before any work (exit 2) as containing the model's files,
// with or without --force, and every blob stays.
func TestHFCacheBlobsAreInputs(t *testing.T) {
	snap, blobs := hfCache(t, tinyModel(t))
	root := filepath.Dir(blobs)
	writeFile(t, blobs, "saved.json", `{"tool": "sparkconv"}`)
	before := tree(t, blobs)
	for _, cmd := range [][]string{
		{"export-onnx", "--model", snap, "--out", blobs, "--force"},
		{"w8a8", "--rtn", "--model", snap, "--out", blobs, "--force"},
		{"w8a8", "--rtn", "--model", snap, "--out", root},
		{"forward", "--model", snap, "--ids", "1,2", "--dump", filepath.Join(blobs, "f"), "--force"},
	} {
		expect(t, 2, []string{"output overlaps an input", "contains the input " + filepath.Join(snap, "config.json") + " (a link to "}[:1], cmd...)
	}
	expect(t, 2, []string{"contains the input " + snap + "/", " (a link to " + blobs + "/"}, "export-onnx", "--model", snap, "--out", blobs, "--force")
	equalTrees(t, before, tree(t, blobs))
}

// smallModel generates the small fixture (8 layers, hidden 512): eval on
// it runs for seconds, long enough to be interrupted.
func smallModel(t *testing.T) string {
	t.Helper()
	m := filepath.Join(t.TempDir(), "s")
	mustRun(t, "fixture", "--preset", "small", "--out", m)
	return m
}

// smallBuild is the small fixture and its w8a8 --rtn build.
func smallBuild(t *testing.T) (model, build string) {
	t.Helper()
	model, build = smallModel(t), filepath.Join(t.TempDir(), "b")
	mustRun(t, "w8a8", "--rtn", "--model", model, "--out", build)
	return model, build
}

// started is a sparkconv process running in the background.
type started struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
}

func start(t *testing.T, env []string, args ...string) *started {
	t.Helper()
	s := &started{cmd: exec.Command(binPath, args...)}
	s.cmd.Env = append(os.Environ(), env...)
	s.cmd.Stderr = &s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.cmd.Process.Kill(); s.cmd.Wait() })
	return s
}

// startOut starts args with OUT replaced by the folder out.
func startOut(t *testing.T, out string, args []string) *started {
	t.Helper()
	a := make([]string, len(args))
	for i, s := range args {
		a[i] = strings.ReplaceAll(s, "OUT", out)
	}
	return start(t, nil, a...)
}

// waitGlob waits until pattern matches a path (false after limit).
func waitGlob(pattern string, limit time.Duration) bool {
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return true
		}
	}
	return false
}

// exit waits for the process and returns its exit status (-1: killed by
// a signal).
func (s *started) exit(t *testing.T) int {
	t.Helper()
	err := s.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

// TestSignalsWriteNothing: cases 11 and 31. eval and forward stop at
// SIGINT or SIGTERM like every other command: exit 130, and nothing
// (--report, --base-logits, --dump) moved into place after the signal; a
// second SIGTERM exits 130 too, after removing the temporary output.
func TestSignalsWriteNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs eval on the small fixture")
	}
	m, build := smallBuild(t)
	ids := strings.Repeat("7,", 1999) + "7"
	for _, c := range []struct {
		name    string
		args    []string
		sigs    []syscall.Signal
		waitFor string // a temporary file of the output being written
	}{
		{"eval SIGINT", []string{"eval", "--base", m, "--model", build, "--report", "OUT/r.html", "--base-logits", "OUT/base.st"}, []syscall.Signal{syscall.SIGINT}, ".base.st.sparkconv-tmp-*"},
		{"eval SIGTERM twice", []string{"eval", "--base", m, "--model", build, "--report", "OUT/r.html", "--base-logits", "OUT/base.st"}, []syscall.Signal{syscall.SIGTERM, syscall.SIGTERM}, ".base.st.sparkconv-tmp-*"},
		{"forward SIGINT", []string{"forward", "--model", m, "--ids", ids, "--dump", "OUT/d.st"}, []syscall.Signal{syscall.SIGINT}, ".d.st.sparkconv-tmp-*"},
		{"fixture SIGTERM twice", []string{"fixture", "--preset", "small", "--out", "OUT/f"}, []syscall.Signal{syscall.SIGTERM, syscall.SIGTERM}, ".f.sparkconv-tmp-*/model.safetensors"},
		{"w8a8 SIGINT twice", []string{"w8a8", "--model", m, "--out", "OUT/w"}, []syscall.Signal{syscall.SIGINT, syscall.SIGINT}, ".w.sparkconv-tmp-*"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := t.TempDir()
			p := startOut(t, out, c.args)
			if !waitGlob(filepath.Join(out, c.waitFor), time.Minute) {
				t.Fatalf("%s never appeared: %s", c.waitFor, p.stderr.String())
			}
			for i, sig := range c.sigs {
				if i > 0 {
					time.Sleep(50 * time.Millisecond) // the first one is being handled
				}
				p.cmd.Process.Signal(sig)
			}
			if code := p.exit(t); code != 130 {
				t.Errorf("exit %d after %v, want 130: %s", code, c.sigs, p.stderr.String())
			}
			if got := names(t, out); len(got) != 0 {
				t.Errorf("written after the signal: %v", got)
			}
		})
	}
}

// names lists a folder's entries.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// TestEvalTempBaseSwept: case 5. eval's temporary base file (no
// --base-logits) is removed by the next eval when a SIGKILL left it, and
// at an interrupt.
func TestEvalTempBaseSwept(t *testing.T) {
	if testing.Short() {
		t.Skip("runs eval on the small fixture")
	}
	m, build := smallBuild(t)
	tmp := t.TempDir()
	env := []string{"TMPDIR=" + tmp}
	p := start(t, env, "eval", "--base", m, "--model", build)
	if !waitGlob(filepath.Join(tmp, "*", ".*sparkconv-tmp-*"), time.Minute) && !waitGlob(filepath.Join(tmp, ".*sparkconv-tmp-*"), time.Second) {
		t.Fatalf("no temporary base file in %s: %v", tmp, names(t, tmp))
	}
	p.cmd.Process.Kill()
	p.exit(t)
	if len(names(t, tmp)) == 0 {
		t.Fatal("nothing left by SIGKILL: the test proves nothing")
	}
	tiny := tinyModel(t)
	if _, errOut, code := runEnv(t, env, "eval", "--base", tiny, "--model", tiny, "--ctx", "64", "--greedy", "0"); code != 0 {
		t.Fatalf("eval: exit %d: %s", code, errOut)
	}
	if got := names(t, tmp); len(got) != 0 {
		t.Errorf("left in $TMPDIR after the next eval: %v", got)
	}
	p = start(t, env, "eval", "--base", m, "--model", build)
	waitGlob(filepath.Join(tmp, "*", ".*sparkconv-tmp-*"), time.Minute)
	p.cmd.Process.Signal(syscall.SIGINT)
	if code := p.exit(t); code != 130 {
		t.Errorf("exit %d after SIGINT: %s", code, p.stderr.String())
	}
	if got := names(t, tmp); len(got) != 0 {
		t.Errorf("left in $TMPDIR after SIGINT: %v", got)
	}
}

// runRSS is runWithin that also returns the command's peak resident
// memory in MiB (VmHWM, read from /proc every few milliseconds while it
// runs: the rusage of a child Go starts counts the test binary's memory
// too, as the kernel keeps the high-water mark across the exec).
func runRSS(t *testing.T, limit time.Duration, args ...string) (string, int, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var peak atomic.Int64
	done := make(chan struct{})
	go func() {
		status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
		for {
			if b, err := os.ReadFile(status); err == nil {
				for _, line := range strings.Split(string(b), "\n") {
					if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
						var kb int64
						fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
						peak.Store(max(peak.Load(), kb>>10))
					}
				}
			}
			select {
			case <-done:
				return
			case <-time.After(3 * time.Millisecond):
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	if ctx.Err() != nil {
		t.Fatalf("sparkconv %s: still running after %s (killed)", strings.Join(args, " "), limit)
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stderr.String(), code, peak.Load()
}

// sparse makes a file of size bytes that takes no disk.
func sparse(t *testing.T, dir, name string, size int64) string {
	t.Helper()
	p := filepath.Join(dir, name)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(size)
	f.Close()
	return p
}

// variedText writes about size bytes of calibration samples drawn from
// the corpus (spans of 20 to 400 words), separated by --- lines.
func variedText(t *testing.T, dir, name string, size int) string {
	t.Helper()
	corpus, err := os.ReadFile("../../corpus/calib.txt")
	if err != nil {
		t.Fatal(err)
	}
	words := strings.Fields(string(corpus))
	var b bytes.Buffer
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteString("\n---\n")
		}
		n := 20 + (i*7919)%381
		s := (i * 104729) % (len(words) - n)
		b.WriteString(strings.Join(words[s:s+n], " "))
	}
	return writeFile(t, dir, name, b.String())
}

// TestEvalTextCaps: cases 6 and 7. eval's text is capped at 2^21 tokens,
// applied while reading: an --ids file past it is refused at the first id
// over (whatever the file's size, never held whole), a --samples text over
// 16 MiB is refused before it is read, and one under it that gives more
// tokens than the cap is refused before any forward. Each in seconds and
// well under 2 GB.
func TestEvalTextCaps(t *testing.T) {
	m := tinyModel(t)
	dir := t.TempDir()
	var ids bytes.Buffer
	for i := 0; ids.Len() < 40<<20; i++ { // 40 MB: 10 million ids
		ids.WriteString("17 301 5 ")
	}
	over := writeFile(t, dir, "ids.txt", ids.String())
	words := variedText(t, dir, "words.txt", 12<<20)
	for _, c := range []struct {
		name  string
		args  []string
		want  string
		maxMB int64
	}{
		{"ids over the cap", []string{"--ids", over}, over + ": more than 2097152 tokens; eval scores at most 2097152", 300},
		{"ids file over 1 GiB", []string{"--ids", sparse(t, dir, "huge-ids.txt", 1<<30+1)}, "1073741825 bytes, larger than the 1 GiB any real file of its kind needs", 100},
		{"samples over 16 MiB", []string{"--samples", sparse(t, dir, "huge.txt", 16<<20+1)}, "16777217 bytes, larger than the 16 MiB any real file of its kind needs", 100},
		{"samples over the token cap", []string{"--samples", words}, words + ": more than 2097152 tokens", 1500},
	} {
		t.Run(c.name, func(t *testing.T) {
			errOut, code, rss := runRSS(t, time.Minute, append([]string{"eval", "--base", m, "--model", m}, c.args...)...)
			if code != 1 || !strings.Contains(errOut, c.want) || rss > c.maxMB {
				t.Errorf("exit %d, peak %d MiB (at most %d): %s", code, rss, c.maxMB, errOut)
			}
		})
	}
}

// TestTokenizerCaps: case 9. A tokenizer.json over 64 MiB is refused
// before it is read, one with a vocabulary over 2^20 tokens while it is
// parsed, by every command that reads it.
func TestTokenizerCaps(t *testing.T) {
	m := tinyModel(t)
	big := filepath.Join(t.TempDir(), "big")
	copyDir(t, m, big)
	sparse(t, big, "tokenizer.json", 64<<20+1) // an object's opening brace, then NUL bytes
	if f, err := os.OpenFile(filepath.Join(big, "tokenizer.json"), os.O_WRONLY, 0); err == nil {
		f.Write([]byte("{"))
		f.Close()
	}
	vocab := filepath.Join(t.TempDir(), "vocab")
	copyDir(t, m, vocab)
	var b bytes.Buffer
	b.WriteString(`{"version": "1.0", "model": {"type": "BPE", "merges": [], "vocab": {`)
	for i := 0; i <= 1<<20; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"t%d":%d`, i, i)
	}
	b.WriteString("}}}")
	writeFile(t, vocab, "tokenizer.json", b.String())
	for _, c := range []struct{ dir, want string }{
		{big, "67108865 bytes, larger than the 64 MiB any real file of its kind needs"},
		{vocab, "vocab: more than 1048576 tokens: no model's vocabulary is that large"},
	} {
		for _, cmd := range [][]string{
			{"forward", "--model", c.dir, "--text", "hello"},
			{"eval", "--base", c.dir, "--model", c.dir},
			{"w8a8", "--model", c.dir, "--out", filepath.Join(t.TempDir(), "o")},
		} {
			errOut, code, rss := runRSS(t, time.Minute, cmd...)
			if code != 1 || !strings.Contains(errOut, c.want) || rss > 600 {
				t.Errorf("%s: exit %d, peak %d MiB: %s", strings.Join(cmd, " "), code, rss, errOut)
			}
		}
	}
}

// TestContextCaps: case 10. export-onnx --context and eval --ctx stop at
// 16384 with the reason (exit 2), before anything is read.
func TestContextCaps(t *testing.T) {
	m := tinyModel(t)
	why := "(no deployment needs more: AI Hub's LLM exports use 4096"
	expect(t, 2, []string{"--context 1048576: want an integer in [2, 16384] " + why}, "export-onnx", "--model", m, "--out", filepath.Join(t.TempDir(), "o"), "--context", "1048576")
	expect(t, 2, []string{"--context 16385: want an integer in [2, 16384]"}, "export-onnx", "--model", m, "--out", filepath.Join(t.TempDir(), "o"), "--context", "16385")
	expect(t, 2, []string{"--ctx 16385: want an integer in [4, 16384] " + why}, "eval", "--base", m, "--model", m, "--ctx", "16385")
}

// TestCalibrationTextBounded: case 8. The calibrating commands apply their
// token budget while reading --samples: 24 MB of text with a budget of 512
// tokens costs no more memory than the model (the whole text tokenized
// once cost 13-20 times the text), and selects what the whole text's
// selection did (the goldens and calib's TestShareStreamed).
func TestCalibrationTextBounded(t *testing.T) {
	m := tinyModel(t)
	dir := t.TempDir()
	text := variedText(t, dir, "big.txt", 24<<20)
	for _, cmd := range [][]string{
		{"w8a8", "--model", m, "--out", filepath.Join(dir, "w"), "--samples", text, "--tokens", "512"},
		{"w8a8", "--model", m, "--out", filepath.Join(dir, "k"), "--samples", text, "--tokens", "512", "--keep-float", "1"},
		{"rotate", "--model", m, "--out", filepath.Join(dir, "r"), "--samples", text, "--smooth-down", "auto"},
	} {
		errOut, code, rss := runRSS(t, 2*time.Minute, cmd...)
		if code != 0 || rss > 250 {
			t.Errorf("%s: exit %d, peak %d MiB (at most 250): %s", strings.Join(cmd[:1], " "), code, rss, errOut)
		}
	}
}

// TestRefusedBeforeWriting: cases 14-17, 20, 23, 24 and 26. Each input
// is refused by name, with the exit status the README gives, and nothing
// is written.
func TestRefusedBeforeWriting(t *testing.T) {
	requireORT(t)
	m := tinyModel(t)
	dir := t.TempDir()
	ex := filepath.Join(dir, "ex")
	mustRun(t, "export-onnx", "--model", m, "--out", ex)
	rotated := filepath.Join(dir, "rot")
	mustRun(t, "rotate", "--model", m, "--out", rotated)
	nul := writeFile(t, dir, "nul.txt", "fine text\n---\nbad \x00 text\n")
	huge := filepath.Join(dir, "huge") // bf16 max in a down_proj: rotating sums past it
	copyDir(t, m, huge)
	pokeTensor(t, huge, "model.layers.1.mlp.down_proj.weight", []byte{0x7f, 0x7f})
	big := filepath.Join(dir, "big") // weights of 1e6 (bf16 0x4974): a 4-bit scale of 133333
	copyDir(t, m, big)
	pokeTensor(t, big, "model.layers.2.mlp.up_proj.weight", []byte{0x74, 0x49})
	both := filepath.Join(dir, "both") // two shards and an index, and a model.safetensors
	mustRun(t, "fixture", "--out", both, "--shards", "2")
	os.Remove(filepath.Join(both, markerName))
	single, _ := os.ReadFile(filepath.Join(m, "model.safetensors"))
	writeFile(t, both, "model.safetensors", string(single))
	trailing := filepath.Join(dir, "trailing")
	mustRun(t, "fixture", "--out", trailing, "--shards", "2")
	idx, _ := os.ReadFile(filepath.Join(trailing, "model.safetensors.index.json"))
	writeFile(t, trailing, "model.safetensors.index.json", string(idx)+`{"weight_map": {}}`)
	out := filepath.Join(dir, "out")
	for _, c := range []struct {
		name string
		code int
		want string
		args []string
	}{
		{"14 --eval text checked first", 1, "--eval: " + nul + ": sample 2 (line 3) holds a NUL byte", []string{"w8a8", "--rtn", "--model", m, "--out", out, "--eval=" + nul}},
		{"15 rotation past bf16", 1, `tensor "model.layers.1.mlp.down_proj.weight" holds Inf at flat index 1536 ([2 0]) after the rotation: the rotated weights pass BF16's range; nothing written`, []string{"rotate", "--model", huge, "--out", out, "--smooth-down", "0"}},
		{"16 gptq scale past float16", 1, "model.layers.2.mlp.up_proj.weight: its largest weight, 9.994e+05, needs a scale of 1.333e+05, beyond float16's 65504", []string{"gptq", "--rtn", "--model", big, "--out", out}},
		{"17 rotating a rotated model", 1, rotated + " is already rotated (config.json records sparkconv_rotation: ", []string{"rotate", "--model", rotated, "--out", out}},
		{"20 --observe past the context", 1, "--observe 2000: the export's context holds 1024 positions", []string{"qnn-bundle", "--model", m, "--export", ex, "--out", out, "--observe", "2000"}},
		{"23 --eval=", 2, `--eval "": want a path or text, not empty (leave the flag out for its default)`, []string{"w8a8", "--rtn", "--model", m, "--out", out, "--eval="}},
		{"23 --samples ''", 2, `--samples "": want a path or text, not empty`, []string{"eval", "--base", m, "--model", m, "--samples", ""}},
		{"24 eval --ort-lib without --export", 2, "--ort-lib applies only with --export; without it the value would be ignored", []string{"eval", "--base", m, "--model", m, "--ort-lib", filepath.Join(dir, "missing.so")}},
		{"24 rotate --samples without smoothing", 2, "--samples applies only with --smooth-down (0 turns smoothing off)", []string{"rotate", "--model", m, "--out", out, "--smooth-down", "0", "--samples", filepath.Join(dir, "missing.txt")}},
		{"26 model.safetensors beside an index", 1, both + " holds both model.safetensors and model.safetensors.index.json naming other shards", []string{"w8a8", "--rtn", "--model", both, "--out", out}},
		{"26 bytes after the index", 1, "model.safetensors.index.json: invalid JSON: data after the index object at byte", []string{"w8a8", "--rtn", "--model", trailing, "--out", out}},
	} {
		t.Run(c.name, func(t *testing.T) {
			expect(t, c.code, []string{c.want}, c.args...)
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%s written", out)
			}
		})
	}
}

// TestBaseLogitsOfAnotherBase: case 12. A --base-logits file made from one
// base model is refused for another (same config, other weights), naming
// both sha256s, instead of scoring against the wrong original.
func TestBaseLogitsOfAnotherBase(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	mustRun(t, "fixture", "--out", a)
	mustRun(t, "fixture", "--out", b, "--seed", "2")
	build := filepath.Join(dir, "w")
	mustRun(t, "w8a8", "--rtn", "--model", a, "--out", build)
	bl := filepath.Join(dir, "base.st")
	ev := func(base string) []string {
		return []string{"eval", "--base", base, "--model", build, "--base-logits", bl, "--ctx", "64", "--greedy", "0"}
	}
	mustRun(t, ev(a)...)
	mustRun(t, ev(a)...) // reused for its own base
	expect(t, 1, []string{"--base-logits " + bl + ": made for another base model (", "sha256 of its config.json and weights", "delete it or give another path"}, ev(b)...)
}

// TestModelChangedDuringRun: case 13. A shard written to while eval,
// calibrate or a --keep-float build reads the model (here: its bytes
// written again, as an in-place rewrite does) is reported by name and
// nothing is written.
func TestModelChangedDuringRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the small fixture")
	}
	m, build := smallBuild(t)
	shard := filepath.Join(m, "model.safetensors")
	for _, c := range []struct {
		name, waitFor string
		args          []string
	}{
		{"eval", "OUT/.b.st.sparkconv-tmp-*", []string{"eval", "--base", m, "--model", build, "--report", "OUT/r.html", "--base-logits", "OUT/b.st"}},
		{"calibrate", "OUT/.c.sparkconv-tmp-*", []string{"calibrate", "--model", m, "--samples", "../../corpus/calib.txt", "--out", "OUT/c"}},
		{"keep-float", "", []string{"w8a8", "--rtn", "--keep-float", "1", "--model", m, "--out", "OUT/k"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := t.TempDir()
			p := startOut(t, out, c.args)
			if c.waitFor != "" && !waitGlob(strings.ReplaceAll(c.waitFor, "OUT", out), time.Minute) {
				t.Fatalf("%s never appeared: %s", c.waitFor, p.stderr.String())
			}
			time.Sleep(300 * time.Millisecond)
			f, err := os.OpenFile(shard, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 1)
			f.ReadAt(b, 100)
			f.WriteAt(b, 100) // the same byte: the model is unchanged, its file is not
			f.Close()
			if code := p.exit(t); code != 1 || !strings.Contains(p.stderr.String(), shard+": changed while sparkconv was reading it") {
				t.Errorf("exit %d: %s", code, p.stderr.String())
			}
			if got := names(t, out); len(got) != 0 {
				t.Errorf("written: %v", got)
			}
		})
	}
}

// TestCPUProfileIsAnOutput: cases 18 and 19. SPARKCONV_CPUPROFILE may not
// name a file inside a path the command is given (exit 2, the folder left
// as it was), and a profile that cannot be written whole (a file size
// limit of 0, as a full disk) fails the command and leaves nothing.
func TestCPUProfileIsAnOutput(t *testing.T) {
	m := tinyModel(t)
	before := tree(t, m)
	_, errOut, code := runEnv(t, []string{"SPARKCONV_CPUPROFILE=" + filepath.Join(m, "cpu.prof")}, "inspect", "--model", m)
	if code != 2 || !strings.Contains(errOut, "SPARKCONV_CPUPROFILE: output overlaps an input: "+filepath.Join(m, "cpu.prof")+" lies inside the input "+m) {
		t.Errorf("a profile inside --model: exit %d: %s", code, errOut)
	}
	equalTrees(t, before, tree(t, m))
	dir := t.TempDir()
	prof := filepath.Join(dir, "cpu.prof")
	cmd := exec.Command("sh", "-c", `ulimit -f 0; exec "$0" "$@"`, binPath, "inspect", "--model", m)
	cmd.Env = append(os.Environ(), "SPARKCONV_CPUPROFILE="+prof)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "SPARKCONV_CPUPROFILE: writing the profile: ") || !strings.Contains(stderr.String(), "; no profile written") {
		t.Errorf("a profile that cannot be written: %v: %s", err, stderr.String())
	}
	if got := names(t, dir); len(got) != 0 {
		t.Errorf("left: %v", got)
	}
	// A profile that can be written is.
	if _, errOut, code := runEnv(t, []string{"SPARKCONV_CPUPROFILE=" + prof}, "inspect", "--model", m); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if st, err := os.Stat(prof); err != nil || st.Size() == 0 {
		t.Errorf("profile: %v", err)
	}
}

// TestSameInputSameBytes: cases 21 and 22. A --keep-float build's
// config.json and an eval report hold no wall-clock figure: two runs write
// the same bytes.
func TestSameInputSameBytes(t *testing.T) {
	m := tinyModel(t)
	dir := t.TempDir()
	var configs, reports [][]byte
	for _, run := range []string{"a", "b"} {
		out := filepath.Join(dir, "k"+run)
		mustRun(t, "w8a8", "--rtn", "--keep-float", "1", "--model", m, "--out", out)
		b, _ := os.ReadFile(filepath.Join(out, "config.json"))
		configs = append(configs, b)
		rep := filepath.Join(dir, "r"+run+".html")
		mustRun(t, "eval", "--base", m, "--model", out, "--ctx", "64", "--greedy", "2", "--report", rep)
		b, _ = os.ReadFile(rep)
		reports = append(reports, b)
	}
	if !bytes.Equal(configs[0], configs[1]) || bytes.Contains(configs[0], []byte(`"seconds"`)) {
		t.Errorf("config.json differs between runs or holds seconds:\n%s", configs[0])
	}
	if !bytes.Equal(reports[0], reports[1]) || bytes.Contains(reports[0], []byte("tokens/s")) {
		t.Error("the eval report differs between runs or holds a throughput")
	}
}

// TestCalibrationAsHeldOutWarned: case 25. Held-out text with the bytes of
// the calibration text is scored, with a warning that says so.
func TestCalibrationAsHeldOutWarned(t *testing.T) {
	m := tinyModel(t)
	calib := "../../corpus/calib.txt"
	expect(t, 0, []string{"sparkconv: warning: --eval " + calib + " is the calibration text " + calib + " (same bytes, sha256 ", "overstate the fidelity"},
		"w8a8", "--model", m, "--out", filepath.Join(t.TempDir(), "o"), "--samples", calib, "--tokens", "512", "--eval="+calib)
}

// TestLockedTempKept: case 27. The temporary folder of a writer whose
// process ID means nothing here (another PID namespace) but who holds its
// lock is kept by the next run beside it; once its lock is free, removed.
func TestLockedTempKept(t *testing.T) {
	m := tinyModel(t)
	dir := t.TempDir()
	other := filepath.Join(dir, ".o.sparkconv-tmp-99999999-1")
	os.Mkdir(other, 0o755)
	writeFile(t, other, "model.safetensors", "being written")
	f, err := os.Open(other)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "w8a8", "--rtn", "--model", m, "--out", filepath.Join(dir, "o"))
	if _, err := os.Stat(filepath.Join(other, "model.safetensors")); err != nil {
		t.Fatalf("a live writer's temporary folder was removed: %v", err)
	}
	f.Close()
	mustRun(t, "w8a8", "--rtn", "--model", m, "--out", filepath.Join(dir, "o"), "--force")
	if _, err := os.Stat(other); err == nil {
		t.Error("an abandoned temporary folder was kept")
	}
}

// TestUnwritableReportFirst: case 28. An eval --report in a folder that
// takes no new file is refused before the evaluation, not after it.
func TestUnwritableReportFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the small fixture")
	}
	if err := os.WriteFile("/sys/sparkconv-probe", nil, 0o644); err == nil {
		os.Remove("/sys/sparkconv-probe")
		t.Skip("/sys takes new files here")
	}
	m := smallModel(t)
	start := time.Now()
	errOut, code, _ := runRSS(t, time.Minute, "eval", "--base", m, "--model", m, "--report", "/sys/r.html")
	if code != 1 || !strings.Contains(errOut, "--report: writing /sys/r.html: ") || time.Since(start) > 3*time.Second {
		t.Errorf("exit %d after %s: %s", code, time.Since(start), errOut)
	}
}

// TestFullStdoutFails: case 29. Text output to a full device fails the
// command (exit 1) instead of exiting 0 with nothing written.
func TestFullStdoutFails(t *testing.T) {
	m := tinyModel(t)
	dir := t.TempDir()
	ex := filepath.Join(dir, "ex")
	mustRun(t, "export-onnx", "--model", m, "--out", ex)
	for _, args := range [][]string{
		{"inspect", "--model", m},
		{"plan", "--model", m},
		{"forward", "--model", m, "--ids", "1,2,3"},
		{"eval", "--base", m, "--model", m, "--ctx", "64", "--greedy", "0"},
		{"lint", filepath.Join(ex, "layer_00.onnx")},
		{"--json", "inspect", "--model", m},
	} {
		full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
		if err != nil {
			t.Skip("no /dev/full")
		}
		cmd := exec.Command(binPath, args...)
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = full, &stderr
		err = cmd.Run()
		full.Close()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "no space left on device") {
			t.Errorf("%s > /dev/full: %v: %s", strings.Join(args, " "), err, stderr.String())
		}
	}
}

// TestJSONSaysGateFailed: case 30. With --json, a build that fails its
// fidelity gate says so in the document (and its report file), exit 1.
func TestJSONSaysGateFailed(t *testing.T) {
	m := tinyModel(t)
	out := filepath.Join(t.TempDir(), "o")
	stdout, errOut, code := run(t, "--json", "w8a8", "--rtn", "--model", m, "--out", out, "--max-kld", "1e-9")
	var doc struct {
		Gate *struct {
			MaxKLD float64 `json:"max_kld"`
			Passed bool
			Error  string
		}
	}
	if code != 1 || json.Unmarshal([]byte(stdout), &doc) != nil || doc.Gate == nil || doc.Gate.Passed || doc.Gate.MaxKLD != 1e-9 || !strings.HasPrefix(doc.Gate.Error, "fidelity gate failed: mean KLD") {
		t.Fatalf("exit %d, gate %+v: %s %s", code, doc.Gate, stdout, errOut)
	}
	b, _ := os.ReadFile(filepath.Join(out, "sparkconv-report.json"))
	if !bytes.Contains(b, []byte(`"passed": false`)) {
		t.Error("the report file does not say the gate failed")
	}
	stdout, _, code = run(t, "--json", "w8a8", "--rtn", "--model", m, "--out", out, "--force", "--max-kld", "1")
	if code != 0 || !strings.Contains(stdout, `"passed": true`) {
		t.Errorf("a passed gate: exit %d: %s", code, stdout)
	}
}

// TestMakeInteropBuildsItsInputs: `make interop` on a fresh clone builds
// what its tests read before pytest runs them: ONNX Runtime's library,
// the Python environment and the real model (test_real_model.py fails
// without it under CI).
func TestMakeInteropBuildsItsInputs(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	out, err := exec.Command("make", "-n", "-C", "../..", "interop").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n interop: %v\n%s", err, out)
	}
	s := string(out)
	pytest := strings.Index(s, "-m pytest")
	for _, step := range []string{"scripts/install-ort.sh", "interop/install.sh", "scripts/real-model.sh"} {
		if i := strings.Index(s, step); i < 0 || pytest < 0 || i > pytest {
			t.Errorf("make interop does not run %s before pytest:\n%s", step, s)
		}
	}
}
