package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeepFloatFlags: --keep-float out of range for the model, or
// --keep-float-tokens alone, are usage errors (exit 2) before anything is
// written; a valid count keeps that many units, named in the config (W8A8's
// ignore list, GPTQ's dynamic rules) and in the report.
func TestKeepFloatFlags(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "m")
	mustRun(t, "fixture", "--preset", "tiny", "--out", m)
	for _, cmd := range []string{"w8a8", "gptq"} {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"--keep-float", "17"}, "--keep-float 17: the model has 16 units"},
			{[]string{"--keep-float", "-1"}, "--keep-float"},
			{[]string{"--keep-float-tokens", "512"}, "--keep-float-tokens needs --keep-float"},
			{[]string{"--keep-float", "2", "--keep-float-tokens", "10"}, "--keep-float-tokens"},
		} {
			args := append([]string{cmd, "--model", m, "--out", filepath.Join(dir, "o"), "--rtn"}, c.args...)
			if _, errOut, code := run(t, args...); code != 2 || !strings.Contains(errOut, c.want) {
				t.Errorf("%s: exit %d, %s", strings.Join(args, " "), code, errOut)
			}
		}
	}
	if _, errOut, code := run(t, "w8a8", "--model", m, "--out", filepath.Join(dir, "o"), "--smooth", "0.5", "--keep-float", "2"); code != 2 || !strings.Contains(errOut, "--smooth with --keep-float") {
		t.Errorf("w8a8 --smooth --keep-float: exit %d, %s", code, errOut)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("wrote %v", entries)
	}
	for _, c := range []struct {
		cmd  string
		args []string
		key  string // where the config names the kept modules
	}{
		{"w8a8", nil, "ignore"},
		{"gptq", []string{"--group", "64"}, "dynamic"},
	} {
		out := filepath.Join(dir, c.cmd)
		mustRun(t, append([]string{c.cmd, "--model", m, "--out", out, "--rtn", "--keep-float", "2", "--keep-float-tokens", "256"}, c.args...)...)
		var cfg map[string]any
		b, _ := os.ReadFile(filepath.Join(out, "config.json"))
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		rec := cfg["sparkconv_keep_float"].(map[string]any)
		mods := rec["modules"].([]any)
		qc, _ := json.Marshal(cfg["quantization_config"].(map[string]any)[c.key])
		for _, mod := range mods {
			if !strings.Contains(strings.ReplaceAll(string(qc), `\\`, ""), mod.(string)) {
				t.Errorf("%s: kept %s not in %s %s", c.cmd, mod, c.key, qc)
			}
		}
		if len(mods) < 2 || rec["count"] != 2.0 || rec["calibration"].(map[string]any)["tokens"].(float64) > 256 {
			t.Errorf("%s: record %v", c.cmd, rec)
		}
		var rep map[string]any
		b, _ = os.ReadFile(filepath.Join(out, "sparkconv-report.json"))
		json.Unmarshal(b, &rep)
		if kf, _ := rep["settings"].(map[string]any)["keep_float"].(map[string]any); kf == nil || len(kf["modules"].([]any)) != len(mods) {
			t.Errorf("%s: report settings %v", c.cmd, rep["settings"])
		}
	}
}

// TestSmoothDownFlag: rotate's --smooth-down takes an alpha in [0, 0.99]
// or auto and refuses anything else with exit 2.
func TestSmoothDownFlag(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "m")
	mustRun(t, "fixture", "--preset", "tiny", "--out", m)
	for _, v := range []string{"1", "-0.1", "Auto", "nan", "0.995"} {
		if _, errOut, code := run(t, "rotate", "--model", m, "--out", filepath.Join(dir, "o"), "--smooth-down", v); code != 2 || !strings.Contains(errOut, "--smooth-down") {
			t.Errorf("--smooth-down %s: exit %d, %s", v, code, errOut)
		}
	}
	out := filepath.Join(dir, "auto")
	mustRun(t, "rotate", "--model", m, "--out", out, "--smooth-down", "auto", "--tokens", "256")
	var cfg map[string]any
	b, _ := os.ReadFile(filepath.Join(out, "config.json"))
	json.Unmarshal(b, &cfg)
	sm := cfg["sparkconv_rotation"].(map[string]any)["down_proj_smoothing"].(map[string]any)
	if sm["alpha"] != "auto" || len(sm["layer_alphas"].([]any)) != 4 {
		t.Errorf("down_proj_smoothing %v", sm)
	}
}
