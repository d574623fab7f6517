package qnn

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sparkconv/onnxpb"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// fullModel sets every ModelProto and GraphProto field onnxpb knows, plus
// unknown fields (training_info on the model, sparse_initializer on the
// graph) that must survive and come out last.
func fullModel() *onnxpb.ModelProto {
	m := cleanLayer().m
	m.ProducerVersion, m.Domain, m.ModelVersion, m.DocString = proto.String("1"), proto.String("d"), proto.Int64(3), proto.String("doc")
	m.MetadataProps = []*onnxpb.StringStringEntryProto{{Key: proto.String("k"), Value: proto.String("v")}}
	g := m.Graph
	g.DocString = proto.String("graph doc")
	g.ValueInfo = []*onnxpb.ValueInfoProto{valueInfo("Pow_0", tF32, 1, 1, 8)}
	g.MetadataProps = []*onnxpb.StringStringEntryProto{{Key: proto.String("gk"), Value: proto.String("gv")}}
	g.Initializer[0].RawData = make([]byte, 0)
	unknown := func(num protowire.Number, payload string) []byte {
		b := protowire.AppendTag(nil, num, protowire.BytesType)
		return protowire.AppendString(b, payload)
	}
	m.ProtoReflect().SetUnknown(unknown(20, "training"))
	g.ProtoReflect().SetUnknown(unknown(15, "sparse"))
	return m
}

func TestEncodeModelMatchesMarshal(t *testing.T) {
	for name, m := range map[string]*onnxpb.ModelProto{
		"full": fullModel(), "dynamo": dynamoModel().m, "empty": {}, "no graph": {IrVersion: proto.Int64(8)},
	} {
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		n, err := EncodeModel(&buf, m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), want) || n != int64(len(want)) {
			t.Errorf("%s: EncodeModel wrote %d bytes (returned %d), Marshal %d; equal=%v", name, buf.Len(), n, len(want), bytes.Equal(buf.Bytes(), want))
		}
	}
	// The unknown fields survive a round trip.
	var buf bytes.Buffer
	if _, err := EncodeModel(&buf, fullModel()); err != nil {
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

func TestWriteModelFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.onnx")
	m := dynamoModel().m
	n, err := WriteModelFile(path, m, false)
	if err != nil {
		t.Fatal(err)
	}
	want := marshal(t, m)
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) || n != int64(len(want)) {
		t.Fatalf("file %d bytes (returned %d), want %d (err %v)", len(got), n, len(want), err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", st.Mode().Perm())
	}
	// An existing file is kept unless force is set.
	other := cleanLayer().m
	if _, err := WriteModelFile(path, other, false); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("overwrite without force: %v", err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, want) {
		t.Error("refused write changed the file")
	}
	if _, err := WriteModelFile(path, other, true); err != nil {
		t.Fatal(err)
	}
	back, err := ReadModelFile(path)
	if err != nil || !proto.Equal(back, other) {
		t.Fatalf("read back: %v", err)
	}
	if _, err := WriteModelFile(dir, other, true); err == nil {
		t.Error("writing over a folder succeeded")
	}
	if _, err := WriteModelFile(filepath.Join(dir, "missing", "x.onnx"), other, false); err == nil {
		t.Error("writing into a missing folder succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("folder holds %d entries (temporary files left?): %v", len(entries), entries)
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
	m := cleanLayer().m
	ext := func(loc string) []*onnxpb.StringStringEntryProto {
		return []*onnxpb.StringStringEntryProto{{Key: proto.String("location"), Value: proto.String(loc)}}
	}
	m.Graph.Initializer[0].ExternalData = ext("w.data")
	m.Graph.Initializer[1].ExternalData = ext("a.data")
	m.Graph.Initializer[2].ExternalData = ext("w.data")
	if got := ExternalLocations(m); strings.Join(got, ",") != "a.data,w.data" {
		t.Errorf("ExternalLocations = %v", got)
	}
	if got := ExternalLocations(dynamoModel().m); len(got) != 0 {
		t.Errorf("no external data, got %v", got)
	}
}
