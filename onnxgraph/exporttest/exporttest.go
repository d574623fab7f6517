// Package exporttest gives tests one way to export a golden mini model
// (testdata/golden/spark-mini-*): Golden names its folder, Export writes
// the decode-step graphs into a temporary folder.
package exporttest

import (
	"context"
	"path/filepath"
	"runtime"
	"testing"

	"sparkconv/onnxgraph"
	"sparkconv/spark"
)

// Golden returns the folder of the checked-in golden set name (for example
// "spark-mini-tied").
func Golden(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "golden", name)
}

// Export exports the model folder with o into a fresh temporary folder and
// returns it.
func Export(tb testing.TB, model string, o onnxgraph.ExportOptions) string {
	tb.Helper()
	m, err := spark.Open(model)
	if err != nil {
		tb.Fatal(err)
	}
	defer m.Close()
	dir := tb.TempDir()
	if _, err := onnxgraph.Export(context.Background(), m, dir, o); err != nil {
		tb.Fatal(err)
	}
	return dir
}
