package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"sparkconv/onnxpb"
	"sparkconv/qnn"
)

// TestLintAndSanitizeCommands runs lint and sanitize on an exported layer
// graph, clean and with a Reshape allowzero=1 planted in it.
func TestLintAndSanitizeCommands(t *testing.T) {
	dir := t.TempDir()
	model, export := filepath.Join(dir, "m"), filepath.Join(dir, "onnx")
	mustRun(t, "fixture", "--preset", "tiny", "--out", model)
	mustRun(t, "export-onnx", "--model", model, "--out", export, "--context", "32", "--layers", "0")
	clean := filepath.Join(export, "layer_00.onnx")
	if out := mustRun(t, "lint", clean); !strings.Contains(out, "0 errors, 0 warnings") {
		t.Errorf("lint of an export: %s", out)
	}

	data, err := os.ReadFile(clean)
	if err != nil {
		t.Fatal(err)
	}
	var m onnxpb.ModelProto
	if err := proto.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	planted := 0
	for _, n := range m.GetGraph().GetNode() {
		if n.GetOpType() == "Reshape" {
			n.Attribute = append(n.Attribute, &onnxpb.AttributeProto{Name: proto.String("allowzero"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(1)})
			planted++
		}
	}
	if planted == 0 {
		t.Fatal("the layer graph has no Reshape")
	}
	bad := filepath.Join(dir, "bad.onnx")
	out, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&m)
	os.WriteFile(bad, out, 0o644)

	stdout, _, code := run(t, "--json", "lint", bad)
	var rep qnn.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("lint --json must print one JSON document: %v\n%s", err, stdout)
	}
	if code != 1 || rep.Errors != planted || rep.Findings[0].Rule != "reshape-allowzero" {
		t.Errorf("lint of the planted graph: exit %d, %+v", code, rep)
	}

	fixed := filepath.Join(dir, "fixed.onnx")
	if out := mustRun(t, "sanitize", bad, "-o", fixed); !strings.Contains(out, "0 errors") || !strings.Contains(out, "allowzero") {
		t.Errorf("sanitize: %s", out)
	}
	if out := mustRun(t, "lint", fixed); !strings.Contains(out, "0 errors") {
		t.Errorf("lint after sanitize: %s", out)
	}
	if _, errOut, code := run(t, "sanitize", bad, "-o", fixed); code != 1 || !strings.Contains(errOut, "exists") {
		t.Errorf("sanitize over an existing output: exit %d %s", code, errOut)
	}
}

// TestLintSeveralFilesAndFolder: lint takes several files or a folder
// (every .onnx below it) and sums their findings.
func TestLintSeveralFilesAndFolder(t *testing.T) {
	m := tinyModel(t)
	out := filepath.Join(t.TempDir(), "onnx")
	mustRun(t, "export-onnx", "--model", m, "--out", out)
	stdout := mustRun(t, "--json", "lint", out, filepath.Join(out, "embed.onnx"))
	var rep struct {
		Files []struct {
			File string `json:"file"`
		} `json:"files"`
		Errors int `json:"errors"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	// tiny: embed, 4 layers, head, then embed again.
	if len(rep.Files) != 7 || rep.Errors != 0 || !strings.HasSuffix(rep.Files[6].File, "embed.onnx") {
		t.Errorf("lint of a folder and a file: %s", stdout)
	}
	if _, errOut, code := run(t, "lint", t.TempDir()); code != 1 || !strings.Contains(errOut, "no .onnx file") {
		t.Errorf("empty folder: exit %d %s", code, errOut)
	}
	if _, _, code := run(t, "lint"); code != 2 {
		t.Errorf("no argument: exit %d", code)
	}
	if _, errOut, code := run(t, "lint", out, "--encodings", "x.json"); code != 2 || !strings.Contains(errOut, "one graph") {
		t.Errorf("--encodings with a folder: exit %d %s", code, errOut)
	}
}
