package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sparkconv/corpus"
	"sparkconv/kernels"
)

// TestEvalCommand: --json carries every figure the issue names; the base
// file is reused; the identical build scores 0; the report is one
// self-contained HTML file.
func TestEvalCommand(t *testing.T) {
	dir := t.TempDir()
	m, q := filepath.Join(dir, "m"), filepath.Join(dir, "q")
	mustRun(t, "fixture", "--preset", "tiny", "--out", m)
	mustRun(t, "w8a8", "--model", m, "--out", q, "--rtn")
	base, report := filepath.Join(dir, "base.st"), filepath.Join(dir, "r.html")
	args := []string{"--json", "eval", "--base", m, "--ctx", "64", "--greedy", "3", "--gen-tokens", "8", "--base-logits", base}
	var r map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, append(args, "--model", q, "--report", report)...)), &r); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"tokens_scored", "kld", "same_top1", "ppl", "ppl_base", "ppl_ratio", "delta_p", "greedy", "ln_ppl_ratio", "tokens_per_s"} {
		if _, ok := r[k]; !ok {
			t.Errorf("--json lacks %q", k)
		}
	}
	kld := r["kld"].(map[string]any)
	for _, k := range []string{"mean", "stderr", "median", "p90", "p99", "p999", "max"} {
		if _, ok := kld[k].(float64); !ok {
			t.Errorf("kld.%s missing", k)
		}
	}
	g := r["greedy"].(map[string]any)
	if g["prompts"] != 3.0 || kld["mean"].(float64) <= 0 || r["same_top1"].(float64) > 1 {
		t.Errorf("greedy %v, kld %v", g, kld)
	}
	html, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	h := string(html)
	if !strings.Contains(h, "<svg") || strings.Contains(h, "<script") || strings.Contains(h, "src=\"http") || !strings.Contains(h, "Weight SNR per quantized tensor") {
		t.Errorf("report is not a self-contained page with plots (%d bytes)", len(h))
	}
	var same map[string]any
	json.Unmarshal([]byte(mustRun(t, append(args, "--model", m)...)), &same)
	if k := same["kld"].(map[string]any); k["mean"] != 0.0 || same["same_top1"] != 1.0 || same["ppl_ratio"] != 1.0 || same["greedy"].(map[string]any)["exact"] != 3.0 {
		t.Errorf("identical build: %v", same)
	}
	if _, errOut, code := run(t, append(args, "--model", q, "--report", report)...); code != 1 || !strings.Contains(errOut, "already exists") {
		t.Errorf("existing report: exit %d, %s", code, errOut)
	}
	for _, bad := range [][]string{{"--ctx", "2"}, {"--greedy", "-1"}, {"--gen-tokens", "0"}, {"--samples", "a", "--ids", "b"}} {
		if _, errOut, code := run(t, append([]string{"eval", "--base", m, "--model", q}, bad...)...); code != 2 {
			t.Errorf("%v: exit %d, %s", bad, code, errOut)
		}
	}
	if _, errOut, code := run(t, "eval", "--base", m, "--model", q, "--ctx", "64", "--base-logits", base, "--greedy", "2"); code != 1 || !strings.Contains(errOut, "greedy prompts") {
		t.Errorf("stale base file: exit %d, %s", code, errOut)
	}
}

// TestPlanCommand: --json gives path, command, why and verified for a
// recorded cpuinfo; bad values exit 2.
func TestPlanCommand(t *testing.T) {
	var c map[string]any
	out := mustRun(t, "--json", "plan", "--cpuinfo", "../../plan/testdata/cpuinfo-xeon-sapphire-rapids-amx.txt", "--model", "/m")
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		t.Fatal(err)
	}
	if c["path"] != "w4a8-zp" || c["verified"] != true || !strings.HasPrefix(c["command"].(string), "sparkconv rotate --model /m --out /m-rot --smooth-down 0 && sparkconv w4a8-zp --model /m-rot ") || c["why"] == "" {
		t.Errorf("plan: %v", c)
	}
	if _, ok := c["kernels"]; ok {
		t.Errorf("a recorded cpuinfo's plan shows this machine's kernels: %v", c)
	}
	// The running machine's plan adds the CPU probe and the kernel table.
	var here struct {
		CPU     struct{ Usable []string } `json:"cpu"`
		Kernels []struct{ Op, Kernel string }
	}
	if err := json.Unmarshal([]byte(mustRun(t, "--json", "plan")), &here); err != nil {
		t.Fatal(err)
	}
	if len(here.Kernels) != 7 || !strings.HasPrefix(here.Kernels[0].Kernel, kernels.Active()) || here.Kernels[6].Kernel != "absent" {
		t.Errorf("plan on this machine: %+v", here)
	}
	if out := mustRun(t, "plan", "--target", "arm64"); !strings.Contains(out, "UNVERIFIED") || !strings.Contains(out, "sparkconv w4a16") {
		t.Errorf("arm64 plan:\n%s", out)
	}
	for _, bad := range [][]string{{"--target", "mips"}, {"--priority", "fast"}, {"--target", "phone", "--cpuinfo", "x"}} {
		if _, errOut, code := run(t, append([]string{"plan"}, bad...)...); code != 2 {
			t.Errorf("%v: exit %d, %s", bad, code, errOut)
		}
	}
}

// TestBuildGate: --eval puts the figures in sparkconv-report.json and
// --max-kld fails the command (exit 1) when the build is worse, keeping it.
func TestBuildGate(t *testing.T) {
	dir := t.TempDir()
	m, q := filepath.Join(dir, "m"), filepath.Join(dir, "q")
	mustRun(t, "fixture", "--preset", "tiny", "--out", m)
	out, errOut, code := run(t, "w8a8", "--model", m, "--out", q, "--rtn", "--max-kld", "1e-9")
	if code != 1 || !strings.Contains(errOut, "fidelity gate failed: mean KLD") || !strings.Contains(out, "eval (built-in held-out text") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	// a short samples file: two samples, one 512-token window
	samples := filepath.Join(dir, "s.txt")
	parts := strings.SplitN(corpus.HeldOut, "\n---\n", 3)
	if err := os.WriteFile(samples, []byte(parts[0]+"\n---\n"+parts[1]+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code = run(t, "w8a8", "--model", m, "--out", filepath.Join(dir, "q1"), "--rtn", "--eval="+samples, "--max-kld", "1"); code != 0 || !strings.Contains(out, "eval (") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var rep struct {
		Eval map[string]any `json:"eval"`
	}
	data, err := os.ReadFile(filepath.Join(q, "sparkconv-report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &rep); err != nil || rep.Eval["kld"] == nil || rep.Eval["same_top1"] == nil {
		t.Errorf("report eval: %v %v", rep.Eval, err)
	}
	q2 := filepath.Join(dir, "q2")
	if out := mustRun(t, "--json", "w4a16", "--model", m, "--out", q2, "--group", "32", "--rtn", "--eval="+samples, "--min-top1", "0.2"); !strings.Contains(out, `"ppl_ratio"`) {
		t.Errorf("--json lacks the eval:\n%s", out)
	}
	for _, bad := range [][]string{{"--max-kld", "0"}, {"--max-kld", "NaN"}, {"--min-top1", "1.5"}, {"--eval=/nonexistent"}} {
		if _, errOut, code := run(t, append([]string{"gptq", "--model", m, "--out", filepath.Join(dir, "x")}, bad...)...); code != 2 {
			t.Errorf("%v: exit %d, %s", bad, code, errOut)
		}
	}
}

// TestEvalExport: an fp32 export scored in ONNX Runtime against its
// checkpoint is within 1e-4 mean KLD; an export too short for the windows
// is refused with the context it needs.
func TestEvalExport(t *testing.T) {
	requireORT(t)
	dir := t.TempDir()
	m, exp, short := filepath.Join(dir, "m"), filepath.Join(dir, "onnx"), filepath.Join(dir, "short")
	mustRun(t, "fixture", "--preset", "tiny", "--out", m)
	mustRun(t, "export-onnx", "--model", m, "--out", exp, "--context", "72", "--layout", "ring")
	samples := filepath.Join(dir, "s.txt")
	if err := os.WriteFile(samples, []byte(strings.SplitN(corpus.HeldOut, "\n---\n", 2)[0]), 0o644); err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	out := mustRun(t, "--json", "eval", "--base", m, "--export", exp, "--samples", samples, "--ctx", "64", "--greedy", "2", "--gen-tokens", "8", "--threads", "1")
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if k := r["kld"].(map[string]any)["mean"].(float64); k > 1e-4 || r["same_top1"].(float64) < 0.99 || !strings.Contains(r["model"].(string), "ONNX export") {
		t.Errorf("fp32 export: %v", r)
	}
	mustRun(t, "export-onnx", "--model", m, "--out", short, "--context", "24")
	if _, errOut, code := run(t, "eval", "--base", m, "--export", short, "--ctx", "64"); code != 1 || !strings.Contains(errOut, "holds 24 positions") {
		t.Errorf("short export: exit %d, %s", code, errOut)
	}
	if _, _, code := run(t, "eval", "--base", m, "--export", exp, "--model", m); code != 2 {
		t.Errorf("--model with --export: exit %d", code)
	}
}
