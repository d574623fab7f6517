package main

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sparkconv/forward"
	"sparkconv/safetensors"
)

const fwdGoldenTied = "../../testdata/golden/spark-mini-tied"

func TestParseTokenIDs(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		err  string
	}{
		{"1,2,3", []int{1, 2, 3}, ""},
		{" 7 , 0 ", []int{7, 0}, ""},
		{"42", []int{42}, ""},
		{"1,,2", nil, `item 2 "" is not a token id`},
		{"1,-2", nil, `item 2 "-2"`},
		{"x", nil, `item 1 "x"`},
		{"1;2", nil, `item 1 "1;2"`},
	}
	for _, tc := range tests {
		got, err := parseTokenIDs(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v %v, want %v", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseTokenIDs(f *testing.F) {
	for _, s := range []string{"1,2,3", " 4 ", "", ",", "99999999999999999999", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := parseTokenIDs(s)
		if err != nil {
			return
		}
		if len(ids) != strings.Count(s, ",")+1 {
			t.Fatalf("%q: %d ids", s, len(ids))
		}
		for _, id := range ids {
			if id < 0 {
				t.Fatalf("%q: negative id %d", s, id)
			}
		}
	})
}

// goldenIDs returns the golden input ids and their "--ids" text.
func goldenIDs(t *testing.T, f *safetensors.File) ([]int, string) {
	t.Helper()
	_, raw, err := f.Raw("input_ids")
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	var parts []string
	for k := 0; k < len(raw); k += 8 {
		id := int(int64(binary.LittleEndian.Uint64(raw[k:])))
		ids = append(ids, id)
		parts = append(parts, strconv.Itoa(id))
	}
	return ids, strings.Join(parts, ",")
}

// TestForwardDumpMatchesGolden runs the command over the golden ids and
// compares the dump with expected.safetensors: same names, shapes and
// dtypes, every tensor at the golden README's float32 bars.
func TestForwardDumpMatchesGolden(t *testing.T) {
	exp, err := safetensors.OpenFile(filepath.Join(fwdGoldenTied, "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	ids, idText := goldenIDs(t, exp)
	dump := filepath.Join(t.TempDir(), "out.safetensors")
	out := mustRun(t, "--json", "forward", "--model", fwdGoldenTied, "--ids", idText, "--dump", dump, "--top-k", "3")
	var rep struct {
		Tokens int `json:"tokens"`
		TopK   []struct {
			ID    int     `json:"id"`
			Logit float32 `json:"logit"`
		} `json:"top_k"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	got, err := safetensors.OpenFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if len(got.Header.Tensors) != len(exp.Header.Tensors) {
		t.Errorf("dump holds %d tensors, golden %d", len(got.Header.Tensors), len(exp.Header.Tensors))
	}
	for _, want := range exp.Header.Tensors {
		ti, ok := got.Header.Tensor(want.Name)
		if !ok || ti.DType != want.DType || !slices.Equal(ti.Shape, want.Shape) {
			t.Errorf("%s: dump has %v %s%v, golden %s%v", want.Name, ok, ti.DType, ti.Shape, want.DType, want.Shape)
			continue
		}
		if want.Name == "input_ids" {
			continue
		}
		_, ref, _ := exp.Float32(want.Name)
		_, val, _ := got.Float32(want.Name)
		if d := forward.Compare(ref, val); d.SNR < 100 || d.MaxAbsDiff > 1e-4*d.MaxAbsRef {
			t.Errorf("%s: %v", want.Name, d)
		}
	}
	_, logits, _ := exp.Float32("logits")
	V := len(logits) / len(ids)
	last := logits[len(logits)-V:]
	if rep.Tokens != len(ids) || len(rep.TopK) != 3 || rep.TopK[0].ID != forward.ArgMax(last) {
		t.Errorf("report %+v; golden argmax %d", rep, forward.ArgMax(last))
	}
	text := mustRun(t, "forward", "--model", fwdGoldenTied, "--ids", idText)
	if !strings.Contains(text, "id "+strconv.Itoa(rep.TopK[0].ID)) || strings.Count(text, "logit") != 5 {
		t.Errorf("text output:\n%s", text)
	}
}

func TestForwardErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"forward", "--model", fwdGoldenTied}, 2, "exactly one of --text and --ids"},
		{[]string{"forward", "--model", fwdGoldenTied, "--ids", "1", "--text", "a"}, 2, "exactly one"},
		{[]string{"forward", "--ids", "1"}, 2, "--model is required"},
		{[]string{"forward", "--model", fwdGoldenTied, "--ids", "1,b"}, 2, `item 2 "b"`},
		{[]string{"forward", "--model", fwdGoldenTied, "--ids", "1", "--top-k", "0"}, 2, "--top-k"},
		{[]string{"forward", "--model", fwdGoldenTied, "--ids", "3,512"}, 1, "position 1: token id 512 out of range (vocab_size 512)"},
		{[]string{"forward", "--model", fwdGoldenTied, "--text", "t3 t4", "--top-k", "513"}, 2, "vocab_size"},
	}
	for _, tc := range tests {
		_, errOut, code := run(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}

func TestForwardDumpNoOverwrite(t *testing.T) {
	dump := filepath.Join(t.TempDir(), "d.safetensors")
	mustRun(t, "forward", "--model", fwdGoldenTied, "--ids", "1,2,3", "--dump", dump)
	before, _ := os.ReadFile(dump)
	if _, errOut, code := run(t, "forward", "--model", fwdGoldenTied, "--ids", "4,5", "--dump", dump); code != 1 || !strings.Contains(errOut, "already exists") {
		t.Errorf("second dump: exit %d %s", code, errOut)
	}
	if after, _ := os.ReadFile(dump); string(after) != string(before) {
		t.Error("existing dump changed without --force")
	}
	mustRun(t, "forward", "--model", fwdGoldenTied, "--ids", "4,5", "--dump", dump, "--force")
	if entries, _ := os.ReadDir(filepath.Dir(dump)); len(entries) != 1 {
		t.Errorf("left beside the dump: %v", entries)
	}
}

// TestForwardQuantized: forward reads a quantized output; the commands that
// need the original refuse it in one line naming what it is.
func TestForwardQuantized(t *testing.T) {
	dir := t.TempDir()
	m, q := filepath.Join(dir, "m"), filepath.Join(dir, "q")
	mustRun(t, "fixture", "--preset", "tiny", "--out", m)
	mustRun(t, "w4a16", "--model", m, "--out", q, "--group", "32", "--rtn")
	out := mustRun(t, "forward", "--model", q, "--ids", "1,2,3")
	if !strings.Contains(out, "W4A16 (tinygemm cpu_int4 g32") {
		t.Errorf("forward output does not name the format:\n%s", out)
	}
	for _, args := range [][]string{
		{"w8a8", "--model", q, "--out", filepath.Join(dir, "x")},
		{"gptq", "--model", q, "--out", filepath.Join(dir, "y")},
		{"export-onnx", "--model", q, "--out", filepath.Join(dir, "z")},
	} {
		_, errOut, code := run(t, args...)
		if code != 1 || !strings.Contains(errOut, "is a tinygemm W4A16 (cpu_int4) checkpoint; give the original") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	zp := filepath.Join(dir, "zp")
	mustRun(t, "w4a8-zp", "--model", m, "--out", zp, "--group", "32", "--rtn")
	if out := mustRun(t, "forward", "--model", zp, "--ids", "1,2,3"); !strings.Contains(out, "compressed-tensors int4 with zero points g32 (W4A8") {
		t.Errorf("forward output does not name the w4a8-zp format:\n%s", out)
	}
	_, errOut, code := run(t, "w4a8-zp", "--model", zp, "--out", filepath.Join(dir, "zz"))
	if code != 1 || !strings.Contains(errOut, "is a compressed-tensors checkpoint (int8 W8A8 or int4 with zero points); give the original") {
		t.Errorf("w4a8-zp of a w4a8-zp output: exit %d, stderr %q", code, errOut)
	}
}
