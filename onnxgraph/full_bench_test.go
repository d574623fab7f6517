package onnxgraph_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	. "sparkconv/onnxgraph"
	"sparkconv/spark"
)

// BenchmarkFullExportF16 exports a full-size checkpoint (SPARKCONV_FULL=DIR)
// as fp16 graphs into b.TempDir(), for profiles (-cpuprofile) and the MB/s
// written; skipped without it.
func BenchmarkFullExportF16(b *testing.B) {
	in := os.Getenv("SPARKCONV_FULL")
	if in == "" {
		b.Skip("set SPARKCONV_FULL to a full-size fixture")
	}
	m, err := spark.Open(in)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	for b.Loop() {
		dir := filepath.Join(b.TempDir(), "out")
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		var written int64
		o := ExportOptions{DType: Float16, Done: func(_ string, n int64) { written += n }}
		if _, err := Export(context.Background(), m, dir, o); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(written)
		os.RemoveAll(dir)
	}
}
