package onnxio

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sparkconv/onnxpb"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func vi(name string, dims ...int64) *onnxpb.ValueInfoProto {
	d := make([]*onnxpb.TensorShapeProto_Dimension, len(dims))
	for i, v := range dims {
		d[i] = &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: v}}
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(1), Shape: &onnxpb.TensorShapeProto{Dim: d}}}}}
}

// smallModel is y = x @ w + b with w as raw bytes and b as float_data.
func smallModel() *onnxpb.ModelProto {
	w := make([]byte, 4*4*4)
	for i := range w {
		w[i] = byte(i * 7)
	}
	return &onnxpb.ModelProto{
		IrVersion:    proto.Int64(8),
		ProducerName: proto.String("onnxio-test"),
		OpsetImport:  []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		Graph: &onnxpb.GraphProto{
			Name: proto.String("g"),
			Node: []*onnxpb.NodeProto{
				{OpType: proto.String("MatMul"), Input: []string{"x", "w"}, Output: []string{"xw"}, Name: proto.String("mm")},
				{OpType: proto.String("Add"), Input: []string{"xw", "b"}, Output: []string{"y"}, Name: proto.String("add")},
			},
			Initializer: []*onnxpb.TensorProto{
				{Name: proto.String("w"), Dims: []int64{4, 4}, DataType: proto.Int32(1), RawData: w},
				{Name: proto.String("b"), Dims: []int64{4}, DataType: proto.Int32(1), FloatData: []float32{1, 2, 3, 4}},
			},
			Input:  []*onnxpb.ValueInfoProto{vi("x", 1, 4)},
			Output: []*onnxpb.ValueInfoProto{vi("y", 1, 4)},
		},
	}
}

// fullModel sets every ModelProto, GraphProto and TensorProto field onnxpb
// knows, plus unknown fields (training_info on the model, sparse_initializer
// on the graph) that must survive and come out last.
func fullModel() *onnxpb.ModelProto {
	m := smallModel()
	m.ProducerVersion, m.Domain, m.ModelVersion, m.DocString = proto.String("1"), proto.String("d"), proto.Int64(3), proto.String("doc")
	m.MetadataProps = []*onnxpb.StringStringEntryProto{{Key: proto.String("k"), Value: proto.String("v")}}
	g := m.Graph
	g.DocString = proto.String("graph doc")
	g.ValueInfo = []*onnxpb.ValueInfoProto{vi("xw", 1, 4)}
	g.MetadataProps = []*onnxpb.StringStringEntryProto{{Key: proto.String("gk"), Value: proto.String("gv")}}
	g.Initializer[0].DocString = proto.String("tensor doc")
	g.Initializer[0].MetadataProps = g.MetadataProps
	unknown := func(num protowire.Number, payload string) []byte {
		b := protowire.AppendTag(nil, num, protowire.BytesType)
		return protowire.AppendString(b, payload)
	}
	m.ProtoReflect().SetUnknown(unknown(20, "training"))
	g.ProtoReflect().SetUnknown(unknown(15, "sparse"))
	return m
}

func marshal(t testing.TB, m *onnxpb.ModelProto) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// streamed moves every raw_data into Data, as the graph builder does.
func streamed(m *onnxpb.ModelProto) Model {
	c := proto.Clone(m).(*onnxpb.ModelProto)
	out := Model{Proto: c}
	for _, t := range c.GetGraph().GetInitializer() {
		if t.RawData == nil {
			out.Data = append(out.Data, nil)
			continue
		}
		out.Data = append(out.Data, Bytes(t.RawData))
		t.RawData = nil
	}
	return out
}

func TestEncodeMatchesMarshal(t *testing.T) {
	for name, m := range map[string]*onnxpb.ModelProto{
		"small": smallModel(), "full": fullModel(), "empty": {}, "no graph": {IrVersion: proto.Int64(8)},
	} {
		want := marshal(t, m)
		for how, mm := range map[string]Model{"inline": {Proto: m}, "streamed": streamed(m)} {
			var buf bytes.Buffer
			n, err := Encode(&buf, mm)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), want) || n != int64(len(want)) || mm.Size() != n {
				t.Errorf("%s %s: Encode wrote %d bytes (returned %d, Size %d), Marshal %d; equal=%v", name, how, buf.Len(), n, mm.Size(), len(want), bytes.Equal(buf.Bytes(), want))
			}
		}
	}
	var buf bytes.Buffer
	if _, err := Encode(&buf, streamed(fullModel())); err != nil {
		t.Fatal(err)
	}
	back := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(buf.Bytes(), back); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(back.ProtoReflect().GetUnknown(), []byte("training")) ||
		!bytes.Contains(back.Graph.ProtoReflect().GetUnknown(), []byte("sparse")) {
		t.Error("unknown fields lost")
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.onnx")
	m := smallModel()
	info, err := WriteFile(path, Model{Proto: m}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := marshal(t, m)
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) || info.Size != int64(len(want)) {
		t.Fatalf("file %d bytes (returned %d), want %d (err %v)", len(got), info.Size, len(want), err)
	}
	if h, _ := HashFile(path); h.SHA256 != info.SHA256 || info.Name != "out.onnx" {
		t.Errorf("FileInfo %+v, hash %+v", info, h)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", st.Mode().Perm())
	}
	other := fullModel()
	if _, err := WriteFile(path, Model{Proto: other}, WriteOptions{}); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("overwrite without force: %v", err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, want) {
		t.Error("refused write changed the file")
	}
	if _, err := WriteFile(path, Model{Proto: other}, WriteOptions{Force: true, Owner: func(string) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	back, err := ReadModelFile(path)
	if err != nil || !proto.Equal(back, other) {
		t.Fatalf("read back: %v", err)
	}
	if _, err := WriteFile(dir, Model{Proto: other}, WriteOptions{Force: true}); err == nil {
		t.Error("writing over a folder succeeded")
	}
	if _, err := WriteFile(filepath.Join(dir, "missing", "x.onnx"), Model{Proto: other}, WriteOptions{}); err == nil {
		t.Error("writing into a missing folder succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("folder holds %d entries (temporary files left?): %v", len(entries), entries)
	}
}

// TestWriteFileExternal: past the threshold the streamed weight moves to
// out.onnx.data at offset 0 with a relative location, and the model and the
// data file together hold exactly the original bytes.
func TestWriteFileExternal(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.onnx")
	m := smallModel()
	info, err := WriteFile(path, streamed(m), WriteOptions{ExternalThreshold: 10, MinExternal: 16})
	if err != nil {
		t.Fatal(err)
	}
	if info.External == nil || info.External.Name != "out.onnx.data" || info.External.Size != 64 {
		t.Fatalf("external %+v", info.External)
	}
	back, err := ReadModelFile(path)
	if err != nil {
		t.Fatal(err)
	}
	w := back.Graph.Initializer[0]
	if w.GetDataLocation() != onnxpb.TensorProto_EXTERNAL || w.RawData != nil || ExternalLocations(back)[0] != "out.onnx.data" {
		t.Fatalf("weight not external: %v", w)
	}
	data, _ := os.ReadFile(path + ".data")
	if !bytes.Equal(data, m.Graph.Initializer[0].RawData) {
		t.Error("external bytes differ")
	}
	if back.Graph.Initializer[1].RawData != nil || len(back.Graph.Initializer[1].FloatData) != 4 {
		t.Error("inline tensor changed")
	}
}

func TestReadModelFileErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.onnx")
	junk := filepath.Join(dir, "junk.onnx")
	os.WriteFile(empty, nil, 0o644)
	os.WriteFile(junk, []byte{0xff, 0xff, 0xff}, 0o644)
	for path, want := range map[string]string{
		empty: "empty", junk: "not an ONNX ModelProto", dir: "folder", filepath.Join(dir, "none.onnx"): "no such file",
	} {
		if _, err := ReadModelFile(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadModelFile(%s) = %v, want %q", filepath.Base(path), err, want)
		}
	}
}

func TestExternalLocations(t *testing.T) {
	m := smallModel()
	ext := func(loc string) []*onnxpb.StringStringEntryProto {
		return []*onnxpb.StringStringEntryProto{{Key: proto.String("location"), Value: proto.String(loc)}}
	}
	m.Graph.Initializer[0].ExternalData = ext("w.data")
	m.Graph.Initializer[1].ExternalData = ext("a.data")
	if got := ExternalLocations(m); strings.Join(got, ",") != "a.data,w.data" {
		t.Errorf("ExternalLocations = %v", got)
	}
	if got := ExternalLocations(smallModel()); len(got) != 0 {
		t.Errorf("no external data, got %v", got)
	}
}

// TestWriteShared: two models holding the same weight write it once; both
// refer to the same bytes (location, offset, length), a weight only the
// second holds follows at the next 4096-aligned offset, and weights of one
// name that differ in shape are refused.
func TestWriteShared(t *testing.T) {
	dir := t.TempDir()
	a := streamed(smallModel())
	bp := smallModel()
	bp.Graph.Initializer = append(bp.Graph.Initializer, &onnxpb.TensorProto{Name: proto.String("extra"), Dims: []int64{8}, DataType: proto.Int32(1), RawData: bytes.Repeat([]byte{9}, 32)})
	b := streamed(bp)
	data, infos, err := WriteShared(filepath.Join(dir, "w.data"), []string{filepath.Join(dir, "a.onnx"), filepath.Join(dir, "b.onnx")}, []Model{a, b}, WriteOptions{MinExternal: 16})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "w.data"))
	w := smallModel().Graph.Initializer[0].RawData
	if data.Size != ExternalAlign+32 || int64(len(raw)) != data.Size || !bytes.Equal(raw[:64], w) || !bytes.Equal(raw[ExternalAlign:], bytes.Repeat([]byte{9}, 32)) {
		t.Fatalf("data file %d bytes (info %+v)", len(raw), data)
	}
	locs := map[string][]string{}
	for i, name := range []string{"a.onnx", "b.onnx"} {
		if infos[i].External == nil || infos[i].External.SHA256 != data.SHA256 {
			t.Errorf("%s: external %+v", name, infos[i].External)
		}
		m, err := ReadModelFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range m.Graph.Initializer {
			if in.GetDataLocation() == onnxpb.TensorProto_EXTERNAL {
				locs[in.GetName()] = append(locs[in.GetName()], fmt.Sprint(in.ExternalData))
			}
		}
	}
	if len(locs["w"]) != 2 || locs["w"][0] != locs["w"][1] || len(locs["extra"]) != 1 || len(locs["b"]) != 0 {
		t.Errorf("external references: %v", locs)
	}
	bad := smallModel()
	bad.Graph.Initializer[0].Dims = []int64{2, 8}
	_, _, err = WriteShared(filepath.Join(dir, "x.data"), []string{filepath.Join(dir, "x.onnx"), filepath.Join(dir, "y.onnx")}, []Model{streamed(smallModel()), streamed(bad)}, WriteOptions{MinExternal: 16})
	if err == nil || !strings.Contains(err.Error(), "initializer w") {
		t.Errorf("mismatched shared weight: %v", err)
	}
}

// TestReadModelWithData: a model written with external data reads back
// with every weight inline, equal to the self-contained model; a location
// outside the model's folder or bytes past the file's end are refused.
func TestReadModelWithData(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.onnx")
	m := smallModel()
	if _, err := WriteFile(path, streamed(m), WriteOptions{ExternalThreshold: 10, MinExternal: 16}); err != nil {
		t.Fatal(err)
	}
	back, err := ReadModelWithData(path)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(back, m) {
		t.Errorf("read back differs from the self-contained model")
	}
	for _, c := range []struct{ key, value, want string }{
		{"location", "../out.onnx.data", "not a file name"},
		{"length", "99999", "outside"},
		{"offset", "x", "offset"},
	} {
		raw, _ := ReadModelFile(path)
		for _, kv := range raw.Graph.Initializer[0].ExternalData {
			if kv.GetKey() == c.key {
				kv.Value = proto.String(c.value)
			}
		}
		bad := filepath.Join(dir, "bad.onnx")
		os.Remove(bad)
		if err := os.WriteFile(bad, marshal(t, raw), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadModelWithData(bad); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s = %s: %v, want %q", c.key, c.value, err, c.want)
		}
	}
}
