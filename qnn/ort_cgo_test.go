//go:build cgo

package qnn

import (
	"testing"

	"sparkconv/onnxgraph"
	"sparkconv/ortrun"
	"sparkconv/ortrun/orttest"
)

// runORT runs model bytes in ONNX Runtime (skipping when the library is
// absent, see orttest) and returns every output.
func runORT(t *testing.T, model []byte, feeds map[string]onnxgraph.Tensor) (map[string]onnxgraph.Tensor, error) {
	t.Helper()
	orttest.Init(t)
	s, err := ortrun.NewSession(model, ortrun.SessionOptions{Threads: 1})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Run(feeds)
}
