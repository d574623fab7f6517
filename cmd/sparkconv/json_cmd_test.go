package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestJSONOnStdout: with --json every command prints exactly one JSON
// document on stdout (human text goes to stderr), on success and on error.
func TestJSONOnStdout(t *testing.T) {
	m := tinyModel(t)
	dir := t.TempDir()
	onnx := filepath.Join(dir, "onnx")
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"version"}, 0},
		{[]string{"fixture", "--out", filepath.Join(dir, "f")}, 0},
		{[]string{"inspect", "--model", m}, 0},
		{[]string{"w8a8", "--rtn", "--model", m, "--out", filepath.Join(dir, "w8")}, 0},
		{[]string{"w4a16", "--rtn", "--model", m, "--out", filepath.Join(dir, "w4")}, 0},
		{[]string{"forward", "--model", m, "--ids", "1,2"}, 0},
		{[]string{"export-onnx", "--model", m, "--out", onnx}, 0},
		{[]string{"lint", onnx}, 0},
		{[]string{"plan", "--cpuinfo", "../../plan/testdata/cpuinfo-epyc-avx2.txt"}, 0},
		{[]string{"calibrate", "--model", m, "--samples", "../../corpus/calib.txt", "--out", filepath.Join(dir, "c")}, 0},
		{[]string{"inspect", "--model", dir}, 1},
		{[]string{"w8a8", "--model", m, "--out", m}, 2},
		{[]string{"verify", "--steps", "0"}, 2},
	} {
		stdout, errOut, code := run(t, append([]string{"--json"}, c.args...)...)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d: %s", c.args, code, c.code, errOut)
			continue
		}
		dec := json.NewDecoder(strings.NewReader(stdout))
		var v map[string]any
		if err := dec.Decode(&v); err != nil {
			t.Errorf("%v: stdout is not a JSON document: %v\n%s", c.args, err, stdout)
			continue
		}
		if dec.More() {
			t.Errorf("%v: more than one JSON document on stdout:\n%s", c.args, stdout)
		}
		if _, isErr := v["error"]; isErr != (c.code != 0) {
			t.Errorf("%v: error field %v with exit %d", c.args, v["error"], code)
		}
	}
}
