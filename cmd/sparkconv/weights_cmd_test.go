package main

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pokeTensor overwrites the data of one tensor of dir/model.safetensors
// with fill repeated.
func pokeTensor(t *testing.T, dir, name string, fill []byte) {
	t.Helper()
	p := filepath.Join(dir, "model.safetensors")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	var h map[string]struct {
		Offsets [2]int `json:"data_offsets"`
	}
	json.Unmarshal(b[8:8+n], &h)
	off, ok := h[name]
	if !ok {
		t.Fatalf("no tensor %s", name)
	}
	data := b[8+int(n):]
	for i := off.Offsets[0]; i < off.Offsets[1]; i += len(fill) {
		copy(data[i:], fill)
	}
	os.WriteFile(p, b, 0o644)
}

// TestExactTensorsReported: an all-zero and a constant weight are
// reproduced exactly by every quantizer: the report says snr_db null with
// "exact": true instead of failing on an infinite SNR.
func TestExactTensorsReported(t *testing.T) {
	m := tinyModel(t)
	zero, constant := "model.layers.1.mlp.up_proj.weight", "model.layers.2.mlp.up_proj.weight"
	pokeTensor(t, m, zero, []byte{0, 0})
	pokeTensor(t, m, constant, []byte{0x80, 0x3f}) // bf16 1.0
	for _, cmd := range [][]string{{"w8a8", "--rtn"}, {"w4a16", "--rtn"}, {"gptq", "--rtn"}, {"w8a8"}} {
		out := filepath.Join(t.TempDir(), "o")
		stdout, errOut, code := run(t, append([]string{"--json"}, append(cmd, "--model", m, "--out", out)...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", cmd, code, errOut)
		}
		var rep struct {
			Totals struct {
				Exact   int      `json:"exact_tensors"`
				MeanSNR *float64 `json:"mean_snr_db"`
			} `json:"totals"`
			Tensors []struct {
				Name  string   `json:"name"`
				SNR   *float64 `json:"snr_db"`
				Exact bool     `json:"exact"`
			} `json:"tensors"`
		}
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
		for _, tr := range rep.Tensors {
			if tr.Name == zero && (tr.SNR != nil || !tr.Exact) {
				t.Errorf("%v: zero tensor snr %v exact %v", cmd, tr.SNR, tr.Exact)
			}
			if tr.Name != zero && tr.Name != constant && (tr.SNR == nil || tr.Exact) {
				t.Errorf("%v: %s snr %v exact %v", cmd, tr.Name, tr.SNR, tr.Exact)
			}
		}
		if rep.Totals.Exact < 1 || rep.Totals.MeanSNR == nil {
			t.Errorf("%v: totals %+v", cmd, rep.Totals)
		}
		b, _ := os.ReadFile(filepath.Join(out, "sparkconv-report.json"))
		if !strings.Contains(string(b), `"exact": true`) {
			t.Errorf("%v: the report file lacks the exact tensor", cmd)
		}
	}
}

// TestNaNWeightRefused: every command that reads weights refuses a NaN,
// naming the tensor, and writes nothing.
func TestNaNWeightRefused(t *testing.T) {
	m := tinyModel(t)
	bad := "model.layers.2.mlp.down_proj.weight"
	pokeTensor(t, m, bad, []byte{0xc0, 0x7f, 0x80, 0x3f}) // NaN, 1.0
	for _, cmd := range [][]string{
		{"forward", "--ids", "1,2,3", "--model", m},
		{"export-onnx", "--model", m, "--out", "OUT"},
		{"w8a8", "--rtn", "--model", m, "--out", "OUT"},
		{"calibrate", "--samples", "../../corpus/calib.txt", "--model", m, "--out", "OUT"},
	} {
		out := filepath.Join(t.TempDir(), "o")
		for i, a := range cmd {
			if a == "OUT" {
				cmd[i] = out
			}
		}
		_, errOut, code := run(t, cmd...)
		if code != 1 || !strings.Contains(errOut, bad) || !strings.Contains(errOut, "NaN") {
			t.Errorf("%v: exit %d: %s", cmd[0], code, errOut)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%v wrote its output", cmd[0])
		}
	}
}
