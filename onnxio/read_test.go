package onnxio_test

import (
	"bufio"
	"bytes"
	"path/filepath"
	"testing"

	"sparkconv/onnxgraph"
	. "sparkconv/onnxio"
	"sparkconv/onnxpb"

	"google.golang.org/protobuf/proto"
)

// structModel writes a graph with two large weights and a small constant.
func structModel(t *testing.T) string {
	b := onnxgraph.New("g", onnxgraph.Float32)
	x := b.Input("x", onnxgraph.Float32, 1, 32)
	w1 := b.Float32s("w1", []int64{32, 32}, make([]float32, 32*32))
	w2 := b.Float32s("w2", []int64{32, 32}, make([]float32, 32*32))
	s := b.Float32s("s", []int64{1}, []float32{0.5})
	b.OpTo("y", "Mul", []string{b.Op("MatMul", []string{b.Op("MatMul", []string{x, w1}), w2}), s})
	b.Output("y", onnxgraph.Float32, 1, 32)
	path := filepath.Join(t.TempDir(), "m.onnx")
	if _, err := b.WriteFile(filepath.Dir(path), "m.onnx", WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadStructure(t *testing.T) {
	path := structModel(t)
	full, err := ReadModelFile(path)
	if err != nil {
		t.Fatal(err)
	}
	same, err := ReadStructure(path, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(full, same) {
		t.Fatal("ReadStructure with no limit differs from proto.Unmarshal")
	}
	lean, err := ReadStructure(path, 1024)
	if err != nil {
		t.Fatal(err)
	}
	kept, dropped := 0, 0
	for i, in := range lean.Graph.Initializer {
		orig := full.Graph.Initializer[i]
		if in.GetName() != orig.GetName() || len(in.Dims) != len(orig.Dims) || in.GetDataType() != orig.GetDataType() {
			t.Fatalf("initializer %d changed", i)
		}
		switch {
		case len(orig.RawData) > 1024 && in.RawData == nil:
			dropped++
		case len(orig.RawData) <= 1024 && bytes.Equal(in.RawData, orig.RawData):
			kept++
		default:
			t.Fatalf("%s: raw %d -> %d bytes", in.GetName(), len(orig.RawData), len(in.RawData))
		}
	}
	if dropped != 2 || kept != 1 || len(lean.Graph.Node) != len(full.Graph.Node) || !proto.Equal(lean.Graph.Node[0], full.Graph.Node[0]) {
		t.Fatalf("kept %d dropped %d", kept, dropped)
	}
}

// FuzzDecodeStructure: never panics; with no size limit it decodes exactly
// what proto.Unmarshal decodes.
func FuzzDecodeStructure(f *testing.F) {
	b := onnxgraph.New("g", onnxgraph.Float32)
	x := b.Input("x", onnxgraph.Float32, 1, 4)
	w := b.Float32s("w", []int64{4, 4}, make([]float32, 16))
	b.OpTo("y", "MatMul", []string{x, w})
	b.Output("y", onnxgraph.Float32, 1, 4)
	small, _ := b.Marshal()
	f.Add(small)
	f.Add([]byte{0x3a, 0x03, 0x2a, 0x01, 0x00})
	f.Add([]byte{0x3a, 0x00, 0x3a, 0x02, 0x12, 0x00})
	f.Add([]byte{0x08, 0x08})
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := DecodeStructure(bufio.NewReader(bytes.NewReader(data)), int64(len(data)), 1<<30)
		want := &onnxpb.ModelProto{}
		werr := proto.Unmarshal(data, want)
		if werr != nil || err != nil {
			return // both may reject differently-broken inputs
		}
		if !proto.Equal(got, want) {
			t.Fatalf("decoded differently from proto.Unmarshal:\n%v\n%v", got, want)
		}
		_, _ = DecodeStructure(bufio.NewReader(bytes.NewReader(data)), int64(len(data)), 2)
	})
}
