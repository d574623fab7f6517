package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCalibrationFlags: out-of-range or contradictory calibration flags are
// usage errors (exit 2) for all three calibrated commands, before anything
// is read or written.
func TestCalibrationFlags(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "m")
	mustRun(t, "fixture", "--preset", "tiny", "--out", m)
	for _, cmd := range []string{"gptq", "w4a16", "w8a8"} {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"--damp", "0"}, "--damp"},
			{[]string{"--damp", "1.5"}, "--damp"},
			{[]string{"--tokens", "10"}, "--tokens"},
			{[]string{"--seq-len", "0"}, "--seq-len"},
			{[]string{"--rtn", "--samples", "x.txt"}, "--samples calibrates"},
			{[]string{"--rtn", "--damp", "0.1"}, "--damp calibrates"},
		} {
			args := append([]string{cmd, "--model", m, "--out", filepath.Join(dir, "o")}, c.args...)
			_, errOut, code := run(t, args...)
			if code != 2 || !strings.Contains(errOut, c.want) {
				t.Errorf("%s: exit %d, %s", strings.Join(args, " "), code, errOut)
			}
		}
	}
	for _, c := range [][]string{{"--smooth", "1.5"}, {"--smooth", "-0.2"}, {"--rtn", "--smooth", "0.8"}} {
		args := append([]string{"w8a8", "--model", m, "--out", filepath.Join(dir, "o")}, c...)
		if _, errOut, code := run(t, args...); code != 2 || !strings.Contains(errOut, "--smooth") {
			t.Errorf("%s: exit %d, %s", strings.Join(args, " "), code, errOut)
		}
	}
	if _, _, code := run(t, "gptq", "--model", m, "--out", filepath.Join(dir, "o"), "--smooth", "0.8"); code != 2 {
		t.Errorf("gptq --smooth: exit %d (the flag is w8a8's)", code)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("wrote %v", entries)
	}
}

// TestGPTQCommand: gptq calibrates by default and prints the held-out
// error per module type; --samples takes the user's text; --rtn does not
// calibrate.
func TestGPTQCommand(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "m")
	mustRun(t, "fixture", "--preset", "tiny", "--out", m)
	out, errOut, code := run(t, "gptq", "--model", m, "--out", filepath.Join(dir, "g"), "--quant-head", "--tokens", "1024")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"GPTQ on 1024 calibration tokens", "down_proj", "lm_head", "round-to-nearest"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "calibrated on 1024 tokens") {
		t.Errorf("stderr: %s", errOut)
	}
	samples := filepath.Join(dir, "s.txt")
	corpus, err := os.ReadFile("../../corpus/calib.txt")
	if err != nil {
		t.Fatal(err)
	}
	two := strings.SplitN(string(corpus), "\n---\n", 3)[:2] // the first two samples
	os.WriteFile(samples, []byte(strings.Join(two, "\n---\n")), 0o644)
	jout := mustRun(t, "--json", "w4a16", "--model", m, "--out", filepath.Join(dir, "w"), "--samples", samples, "--tokens", "256")
	var rep struct {
		Calibration struct {
			Sources []string `json:"sources"`
			Samples int      `json:"samples"`
		} `json:"calibration"`
	}
	if err := json.Unmarshal([]byte(jout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Calibration.Sources) != 1 || rep.Calibration.Sources[0] != samples || rep.Calibration.Samples != 2 {
		t.Errorf("calibration %+v", rep.Calibration)
	}
	out = mustRun(t, "gptq", "--model", m, "--out", filepath.Join(dir, "r"), "--rtn")
	if !strings.Contains(out, "rtn-mse-search") {
		t.Errorf("--rtn: %s", out)
	}
}
