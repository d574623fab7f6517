package qnn

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"sparkconv/onnxgraph"
	"sparkconv/onnxio"
	"sparkconv/spark"
)

// TestLintRealExports exports the golden mini model with onnxgraph (code
// this package did not write) in every layout, granularity, dtype and GELU
// form, and requires: no finding at all on any graph, Sanitize changes
// nothing, and EncodeModel reproduces each file byte for byte (onnxgraph's
// streaming serializer claims protobuf's deterministic encoding too).
func TestLintRealExports(t *testing.T) {
	dir := "../testdata/golden/spark-mini-tied"
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		t.Fatalf("golden model absent: %v", err)
	}
	m, err := spark.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, o := range []onnxgraph.ExportOptions{
		{Layout: "auto", Context: 64},
		{Layout: "roll", Context: 32, Granularity: "block", DType: onnxgraph.Float16, GELU: "tanh"},
		{Layout: "ring", Context: 16, GELU: "erf"},
	} {
		out := t.TempDir()
		man, err := onnxgraph.Export(context.Background(), m, out, o)
		if err != nil {
			t.Fatalf("export %+v: %v", o, err)
		}
		if len(man.Graphs) < 3 {
			t.Fatalf("export %+v wrote %d graphs", o, len(man.Graphs))
		}
		for _, g := range man.Graphs {
			path := filepath.Join(out, g.File)
			mp, err := onnxio.ReadModelFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if fs := Lint(mp); len(fs) != 0 {
				t.Errorf("%s %+v: %v", g.File, o, fs)
			}
			if ch, err := Sanitize(mp); err != nil || len(ch) != 0 {
				t.Errorf("%s: sanitize changed %v (err %v)", g.File, ch, err)
			}
			var buf bytes.Buffer
			if _, err := onnxio.Encode(&buf, onnxio.Model{Proto: mp}); err != nil {
				t.Fatal(err)
			}
			if file, _ := os.ReadFile(path); !bytes.Equal(file, buf.Bytes()) {
				t.Errorf("%s: EncodeModel gives %d bytes, the file has %d (or differs)", g.File, buf.Len(), len(file))
			}
		}
	}
}
