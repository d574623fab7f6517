package onnxpb

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// wire builds protobuf bytes by hand with the field numbers of upstream
// onnx/onnx.proto (docs/qnn.md#onnx-protobuf-field-numbers), independently of the generated code.
type wire []byte

func (w wire) varint(num protowire.Number, v uint64) wire {
	b := protowire.AppendTag(w, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func (w wire) bytes(num protowire.Number, v []byte) wire {
	b := protowire.AppendTag(w, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func (w wire) str(num protowire.Number, s string) wire { return w.bytes(num, []byte(s)) }

func (w wire) fixed32(num protowire.Number, v uint32) wire {
	b := protowire.AppendTag(w, num, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, v)
}

// TestFieldNumbers marshals one message of each kind and compares with bytes
// written by hand from the upstream field numbers.
func TestFieldNumbers(t *testing.T) {
	dim := func(v int64) []byte { return wire(nil).varint(1, uint64(v)) }
	shape := wire(nil).bytes(1, dim(1)).bytes(1, dim(3))
	tensorType := wire(nil).varint(1, 1).bytes(2, shape)
	typ := wire(nil).bytes(1, tensorType)
	vi := wire(nil).str(1, "x").bytes(2, typ)
	ext := wire(nil).str(1, "location").str(2, "w.bin")
	tensor := wire(nil).varint(1, 3).varint(2, 10).str(8, "w").bytes(13, ext).varint(14, 1)
	attr := wire(nil).str(1, "axis").fixed32(2, 0x3f800000).varint(3, 0xFFFFFFFFFFFFFFFF).varint(20, 2)
	node := wire(nil).str(1, "x").str(1, "w").str(2, "y").str(3, "n0").str(4, "Add").bytes(5, attr).str(7, "")
	graph := wire(nil).bytes(1, node).str(2, "g").bytes(5, tensor).bytes(11, vi).bytes(12, vi)
	opset := wire(nil).str(1, "").varint(2, 17)
	meta := wire(nil).str(1, "k").str(2, "v")
	want := wire(nil).varint(1, 8).str(2, "sparkconv").bytes(7, graph).bytes(8, opset).bytes(14, meta)

	shapeP := &TensorShapeProto{Dim: []*TensorShapeProto_Dimension{
		{Value: &TensorShapeProto_Dimension_DimValue{DimValue: 1}},
		{Value: &TensorShapeProto_Dimension_DimValue{DimValue: 3}},
	}}
	viP := &ValueInfoProto{Name: proto.String("x"), Type: &TypeProto{Value: &TypeProto_TensorType{
		TensorType: &TypeProto_Tensor{ElemType: proto.Int32(int32(TensorProto_FLOAT)), Shape: shapeP}}}}
	m := &ModelProto{
		IrVersion:    proto.Int64(8),
		ProducerName: proto.String("sparkconv"),
		Graph: &GraphProto{
			Node: []*NodeProto{{
				Input: []string{"x", "w"}, Output: []string{"y"}, Name: proto.String("n0"),
				OpType: proto.String("Add"), Domain: proto.String(""),
				Attribute: []*AttributeProto{{
					Name: proto.String("axis"), F: proto.Float32(1), I: proto.Int64(-1),
					Type: AttributeProto_INT.Enum(),
				}},
			}},
			Name: proto.String("g"),
			Initializer: []*TensorProto{{
				Dims: []int64{3}, DataType: proto.Int32(int32(TensorProto_FLOAT16)), Name: proto.String("w"),
				ExternalData: []*StringStringEntryProto{{Key: proto.String("location"), Value: proto.String("w.bin")}},
				DataLocation: TensorProto_EXTERNAL.Enum(),
			}},
			Input:  []*ValueInfoProto{viP},
			Output: []*ValueInfoProto{viP},
		},
		OpsetImport:   []*OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		MetadataProps: []*StringStringEntryProto{{Key: proto.String("k"), Value: proto.String("v")}},
	}
	got, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("marshal mismatch\n got %x\nwant %x", got, []byte(want))
	}
	back := &ModelProto{}
	if err := proto.Unmarshal(want, back); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(back, m) {
		t.Fatalf("unmarshal of hand-written bytes differs: %v", back)
	}
}

// TestEnumValues pins enum numbers that files depend on.
func TestEnumValues(t *testing.T) {
	cases := []struct {
		name string
		got  int32
		want int32
	}{
		{"FLOAT", int32(TensorProto_FLOAT), 1},
		{"INT64", int32(TensorProto_INT64), 7},
		{"BOOL", int32(TensorProto_BOOL), 9},
		{"FLOAT16", int32(TensorProto_FLOAT16), 10},
		{"BFLOAT16", int32(TensorProto_BFLOAT16), 16},
		{"INT4", int32(TensorProto_INT4), 22},
		{"EXTERNAL", int32(TensorProto_EXTERNAL), 1},
		{"attr FLOAT", int32(AttributeProto_FLOAT), 1},
		{"attr INT", int32(AttributeProto_INT), 2},
		{"attr STRING", int32(AttributeProto_STRING), 3},
		{"attr TENSOR", int32(AttributeProto_TENSOR), 4},
		{"attr INTS", int32(AttributeProto_INTS), 7},
		{"attr TYPE_PROTOS", int32(AttributeProto_TYPE_PROTOS), 14},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}

// TestPackedRepeated checks float_data/int64_data are packed and dims is not,
// as upstream declares.
func TestPackedRepeated(t *testing.T) {
	tp := &TensorProto{Dims: []int64{2, 1}, FloatData: []float32{1, 2}, Int64Data: []int64{5}}
	got, err := proto.MarshalOptions{Deterministic: true}.Marshal(tp)
	if err != nil {
		t.Fatal(err)
	}
	var packedF []byte
	packedF = protowire.AppendFixed32(packedF, 0x3f800000)
	packedF = protowire.AppendFixed32(packedF, 0x40000000)
	want := wire(nil).varint(1, 2).varint(1, 1).bytes(4, packedF).bytes(7, protowire.AppendVarint(nil, 5))
	if !bytes.Equal(got, want) {
		t.Fatalf("got %x want %x", got, []byte(want))
	}
}

// FuzzUnmarshalModel: decoding arbitrary bytes never panics and whatever
// decodes re-encodes to bytes that decode to an equal message.
func FuzzUnmarshalModel(f *testing.F) {
	f.Add([]byte{0x08, 0x08})
	f.Add([]byte(wire(nil).varint(1, 8).bytes(8, wire(nil).str(1, "").varint(2, 17))))
	f.Add([]byte{0x3a, 0x02, 0x12, 0x00})
	f.Add([]byte{0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		m := &ModelProto{}
		if err := proto.Unmarshal(data, m); err != nil {
			return
		}
		out, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatalf("re-marshal: %v", err)
		}
		m2 := &ModelProto{}
		if err := proto.Unmarshal(out, m2); err != nil {
			t.Fatalf("re-unmarshal: %v", err)
		}
		if !proto.Equal(m, m2) {
			t.Fatal("round trip changed the message")
		}
	})
}
