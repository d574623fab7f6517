package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const calibCorpus = "../../corpus/calib.txt"

func TestCalibrateCommand(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m")
	mustRun(t, "fixture", "--preset", "tiny", "--out", model)
	o1, o2 := filepath.Join(dir, "c1"), filepath.Join(dir, "c2")
	args := []string{"calibrate", "--model", model, "--samples", calibCorpus, "--max-samples", "3", "--seed", "5", "--seq-len", "48"}
	out, errOut, code := run(t, append([]string{"--json"}, append(args, "--out", o1)...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		PeakRSS float64 `json:"peak_rss_mb"`
		Summary struct {
			Tokens  int64 `json:"tokens"`
			Chunks  int   `json:"chunks"`
			Samples []struct {
				Index  int `json:"index"`
				Tokens int `json:"tokens"`
				Chunks int `json:"chunks"`
			} `json:"samples"`
			Layers []struct {
				Ranges map[string]struct {
					AbsMax float32 `json:"absmax"`
				} `json:"ranges"`
			} `json:"layers"`
		} `json:"summary"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	s := rep.Summary
	if len(s.Samples) != 3 || s.Chunks <= 3 || len(s.Layers) != 4 || rep.PeakRSS <= 0 {
		t.Errorf("summary: %d samples, %d chunks, %d layers, peak %g MB", len(s.Samples), s.Chunks, len(s.Layers), rep.PeakRSS)
	}
	var sum int64
	for _, x := range s.Samples {
		sum += int64(x.Tokens)
		if x.Chunks != (x.Tokens+47)/48 {
			t.Errorf("sample %d: %d tokens in %d chunks of 48", x.Index, x.Tokens, x.Chunks)
		}
	}
	if sum != s.Tokens || s.Layers[0].Ranges["hidden_in"].AbsMax <= 0 {
		t.Errorf("tokens %d vs %d; layer 0 input absmax %g", sum, s.Tokens, s.Layers[0].Ranges["hidden_in"].AbsMax)
	}
	if !strings.Contains(errOut, "input absmax") || !strings.Contains(errOut, "peak RSS") {
		t.Errorf("stderr summary:\n%s", errOut)
	}
	mustRun(t, append(args, "--out", o2)...)
	equalTrees(t, tree(t, o1), tree(t, o2))
	if _, errOut, code := run(t, append(args, "--out", o2)...); code != 1 || !strings.Contains(errOut, "already exists") {
		t.Errorf("existing output: exit %d, %s", code, errOut)
	}
	mustRun(t, append(args, "--out", o2, "--force")...)
	equalTrees(t, tree(t, o1), tree(t, o2))
}

func TestCalibrateErrors(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m")
	mustRun(t, "fixture", "--preset", "tiny", "--out", model)
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bin := write("blob.txt", "fine text\n---\nPK\x03\x04\x00\x00binary")
	latin := write("latin1.txt", "one\n---\ntwo\n---\ncaf\xe9 au lait")
	empty := write("empty.txt", "one\n---\n\n---\nthree")
	jsonl := write("s.jsonl", "{\"text\":\"hello world\"}\n{\"title\":\"no text\"}\n")
	short := write("short.txt", "hello world")
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--samples", bin}, 1, "blob.txt: sample 2 (line 3) holds a NUL byte"},
		{[]string{"--samples", latin}, 1, "latin1.txt: sample 3 (line 5) is not valid UTF-8"},
		{[]string{"--samples", empty}, 1, "empty.txt: sample 2 (line 3) is empty"},
		{[]string{"--samples", jsonl}, 1, "s.jsonl: sample 2 (line 2): no string field \"text\""},
		{[]string{"--samples", short}, 1, "tokens, fewer than the 128 needed (--min-tokens)"},
		{[]string{"--samples", filepath.Join(dir, "missing.txt")}, 1, "missing.txt"},
		{[]string{"--samples", short, "--seq-len", "0"}, 2, "--seq-len"},
		{[]string{}, 2, "--samples and --out are required"},
	}
	for _, tc := range tests {
		args := append([]string{"calibrate", "--model", model, "--out", filepath.Join(dir, "o")}, tc.args...)
		_, errOut, code := run(t, args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q; want exit %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
		if _, err := os.Stat(filepath.Join(dir, "o")); !os.IsNotExist(err) {
			t.Fatalf("%v: output folder left behind", tc.args)
		}
	}
}
