package qnn

import (
	"fmt"
	"math"
	"testing"

	"sparkconv/onnxpb"

	"google.golang.org/protobuf/proto"
)

// tb builds small ModelProtos by hand for the tests.
type tb struct {
	m *onnxpb.ModelProto
	g *onnxpb.GraphProto
}

const (
	tF32  = onnxpb.TensorProto_FLOAT
	tI64  = onnxpb.TensorProto_INT64
	tBool = onnxpb.TensorProto_BOOL
)

func newTB(opset int64) *tb {
	g := &onnxpb.GraphProto{Name: proto.String("test")}
	return &tb{g: g, m: &onnxpb.ModelProto{
		IrVersion:    proto.Int64(8),
		OpsetImport:  []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(opset)}},
		ProducerName: proto.String("qnn-test"),
		Graph:        g,
	}}
}

func valueInfo(name string, dt onnxpb.TensorProto_DataType, dims ...int64) *onnxpb.ValueInfoProto {
	d := make([]*onnxpb.TensorShapeProto_Dimension, len(dims))
	for i, v := range dims {
		d[i] = &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: v}}
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(dt)), Shape: &onnxpb.TensorShapeProto{Dim: d}}}}}
}

func (b *tb) in(name string, dt onnxpb.TensorProto_DataType, dims ...int64) string {
	b.g.Input = append(b.g.Input, valueInfo(name, dt, dims...))
	return name
}

func (b *tb) out(name string, dt onnxpb.TensorProto_DataType, dims ...int64) {
	b.g.Output = append(b.g.Output, valueInfo(name, dt, dims...))
}

func (b *tb) f32(name string, dims []int64, v ...float32) string {
	b.g.Initializer = append(b.g.Initializer, &onnxpb.TensorProto{Name: proto.String(name), Dims: dims,
		DataType: proto.Int32(int32(tF32)), FloatData: v})
	return name
}

func (b *tb) i64(name string, dims []int64, v ...int64) string {
	b.g.Initializer = append(b.g.Initializer, &onnxpb.TensorProto{Name: proto.String(name), Dims: dims,
		DataType: proto.Int32(int32(tI64)), Int64Data: v})
	return name
}

// op adds a node with one output named after the node and returns it.
func (b *tb) op(op string, ins []string, attrs ...*onnxpb.AttributeProto) string {
	out := fmt.Sprintf("%s_%d", op, len(b.g.Node))
	b.opTo(out, op, ins, attrs...)
	return out
}

func (b *tb) opTo(out, op string, ins []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	n := &onnxpb.NodeProto{Name: proto.String(fmt.Sprintf("n%d_%s", len(b.g.Node), op)), OpType: proto.String(op),
		Input: ins, Output: []string{out}, Attribute: attrs}
	b.g.Node = append(b.g.Node, n)
	return n
}

func aInt(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

func aInts(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func aTensor(name string, t *onnxpb.TensorProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t}
}

func marshal(t testing.TB, m *onnxpb.ModelProto) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ramp returns n deterministic values in [-2, 2) (no two equal).
func ramp(n int, seed float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(4*math.Mod(seed+float64(i)*0.6180339887, 1) - 2)
	}
	return v
}

// findings filters fs by rule.
func findings(fs []Finding, rule string) []Finding {
	var out []Finding
	for _, f := range fs {
		if f.Rule == rule {
			out = append(out, f)
		}
	}
	return out
}
