package onnxgraph_test

import (
	"bufio"
	"bytes"
	"path/filepath"
	"testing"

	. "sparkconv/onnxgraph"
	"sparkconv/onnxpb"

	"google.golang.org/protobuf/proto"
)

func TestReadStructure(t *testing.T) {
	dir := export(t, tiedDir, ExportOptions{Context: 16})
	for _, name := range []string{"embed.onnx", "layer_03.onnx", "head.onnx"} {
		path := filepath.Join(dir, name)
		full := readModel(t, path)
		same, err := ReadStructure(path, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(full, same) {
			t.Fatalf("%s: ReadStructure with no limit differs from proto.Unmarshal", name)
		}
		lean, err := ReadStructure(path, 1024)
		if err != nil {
			t.Fatal(err)
		}
		kept, dropped := 0, 0
		for i, in := range lean.Graph.Initializer {
			orig := full.Graph.Initializer[i]
			if in.GetName() != orig.GetName() || len(in.Dims) != len(orig.Dims) || in.GetDataType() != orig.GetDataType() {
				t.Fatalf("%s: initializer %d changed", name, i)
			}
			switch {
			case len(orig.RawData) > 1024 && in.RawData == nil:
				dropped++
			case len(orig.RawData) <= 1024 && bytes.Equal(in.RawData, orig.RawData):
				kept++
			default:
				t.Fatalf("%s: %s raw %d -> %d bytes", name, in.GetName(), len(orig.RawData), len(in.RawData))
			}
		}
		if dropped == 0 || (name == "layer_03.onnx" && kept == 0) || !proto.Equal(lean.Graph.Node[0], full.Graph.Node[0]) || len(lean.Graph.Node) != len(full.Graph.Node) {
			t.Fatalf("%s: kept %d dropped %d", name, kept, dropped)
		}
	}
}

// FuzzDecodeStructure: never panics; with no size limit it decodes exactly
// what proto.Unmarshal decodes.
func FuzzDecodeStructure(f *testing.F) {
	b := New("g", Float32)
	x := b.Input("x", Float32, 1, 4)
	w := b.Float32s("w", []int64{4, 4}, make([]float32, 16))
	b.OpTo("y", "MatMul", []string{x, w})
	b.Output("y", Float32, 1, 4)
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
