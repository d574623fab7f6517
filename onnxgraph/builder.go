package onnxgraph

import (
	"fmt"
	"math"

	"sparkconv/onnxpb"

	"google.golang.org/protobuf/proto"
)

// Opset and IRVersion are what every graph declares: opset 17 needs IR 8,
// and AI Hub's checker accepts IR <= 11 (docs/qnn.md#ir-version-and-opset).
const (
	Opset     = 17
	IRVersion = 8
	Producer  = "sparkconv"
)

// DType is an ONNX element type (the TensorProto.DataType numbers).
type DType int32

// The element types sparkconv graphs use.
const (
	Float32 DType = DType(onnxpb.TensorProto_FLOAT)
	Float16 DType = DType(onnxpb.TensorProto_FLOAT16)
	Int64   DType = DType(onnxpb.TensorProto_INT64)
)

// Size is the element size in bytes.
func (d DType) Size() int {
	switch d {
	case Float32:
		return 4
	case Float16:
		return 2
	case Int64:
		return 8
	}
	return 0
}

// String is the manifest spelling: float32, float16, int64.
func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Float16:
		return "float16"
	case Int64:
		return "int64"
	}
	return fmt.Sprintf("dtype(%d)", int32(d))
}

// ParseDType reads a manifest dtype name.
func ParseDType(s string) (DType, error) {
	switch s {
	case "float32":
		return Float32, nil
	case "float16":
		return Float16, nil
	case "int64":
		return Int64, nil
	}
	return 0, fmt.Errorf("unknown dtype %q (want float32, float16 or int64)", s)
}

// ValueInfo is a graph input or output: name, element type, static shape.
type ValueInfo struct {
	Name  string  `json:"name"`
	Shape []int64 `json:"shape"`
	DType DType   `json:"-"`
}

// initializer is a weight: its proto without data, and where the bytes are.
type initializer struct {
	t    *onnxpb.TensorProto
	data Data
}

// Builder assembles one graph. Names it invents are unique and depend only
// on the order of calls, so the same calls give the same bytes.
type Builder struct {
	name    string
	nodes   []*onnxpb.NodeProto
	inits   []initializer
	inputs  []ValueInfo
	outputs []ValueInfo
	used    map[string]bool
	counter map[string]int
	consts  map[string]string
	// Float is the element type of the float constants the helpers make
	// (Scalar); set it before adding nodes.
	Float  DType
	prefix string
	meta   [][2]string
}

// New starts a graph called name whose float constants are of type float.
func New(name string, float DType) *Builder {
	return &Builder{name: name, used: map[string]bool{}, counter: map[string]int{}, consts: map[string]string{}, Float: float}
}

// SetPrefix sets the scope prepended to invented names ("" for none).
func (b *Builder) SetPrefix(p string) { b.prefix = p }

// scope makes out (when given) the prefix of invented names until the
// returned function restores the previous one.
func (b *Builder) scope(out string) func() {
	old := b.prefix
	if out != "" {
		b.prefix = out
	}
	return func() { b.prefix = old }
}

// opOut is OpTo(out, ...) or, with out "", Op.
func (b *Builder) opOut(out, op string, inputs []string, attrs ...Attr) string {
	if out == "" {
		return b.Op(op, inputs, attrs...)
	}
	return b.OpTo(out, op, inputs, attrs...)
}

// Meta adds a metadata_props entry to the model.
func (b *Builder) Meta(key, value string) { b.meta = append(b.meta, [2]string{key, value}) }

// claim reserves an exact name; reusing one is a programming error.
func (b *Builder) claim(name string) string {
	if name == "" {
		panic("onnxgraph: empty value name")
	}
	if b.used[name] {
		panic(fmt.Sprintf("onnxgraph: value name %q used twice in graph %s", name, b.name))
	}
	b.used[name] = true
	return name
}

// fresh invents a unique name from a stem.
func (b *Builder) fresh(stem string) string {
	if b.prefix != "" {
		stem = b.prefix + "/" + stem
	}
	for {
		n := b.counter[stem]
		b.counter[stem] = n + 1
		name := fmt.Sprintf("%s_%d", stem, n)
		if !b.used[name] {
			return b.claim(name)
		}
	}
}

// Input declares a graph input and returns its name.
func (b *Builder) Input(name string, dt DType, shape ...int64) string {
	b.inputs = append(b.inputs, ValueInfo{Name: b.claim(name), Shape: append([]int64(nil), shape...), DType: dt})
	return name
}

// Output declares value (already produced) as a graph output. Producing
// the value under its output name is the caller's job (see OpTo).
func (b *Builder) Output(name string, dt DType, shape ...int64) {
	if !b.used[name] {
		panic(fmt.Sprintf("onnxgraph: output %q of graph %s is never produced", name, b.name))
	}
	b.outputs = append(b.outputs, ValueInfo{Name: name, Shape: append([]int64(nil), shape...), DType: dt})
}

// Inputs and Outputs return the declared graph inputs and outputs in order.
func (b *Builder) Inputs() []ValueInfo  { return b.inputs }
func (b *Builder) Outputs() []ValueInfo { return b.outputs }

// Attr is one node attribute.
type Attr = *onnxpb.AttributeProto

// AttrInt and AttrInts make attributes.
func AttrInt(name string, v int64) Attr {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

func AttrInts(name string, v ...int64) Attr {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

// Op adds a node with one invented output and returns that output's name.
func (b *Builder) Op(op string, inputs []string, attrs ...Attr) string {
	out := b.fresh(op)
	b.node(op, inputs, []string{out}, attrs)
	return out
}

// OpN adds a node with n invented outputs.
func (b *Builder) OpN(op string, n int, inputs []string, attrs ...Attr) []string {
	outs := make([]string, n)
	for i := range outs {
		outs[i] = b.fresh(op)
	}
	b.node(op, inputs, outs, attrs)
	return outs
}

// OpTo adds a node whose single output gets the exact name out (a graph
// output, typically) and returns it.
func (b *Builder) OpTo(out, op string, inputs []string, attrs ...Attr) string {
	b.node(op, inputs, []string{b.claim(out)}, attrs)
	return out
}

func (b *Builder) node(op string, inputs, outputs []string, attrs []Attr) {
	for _, in := range inputs {
		if in != "" && !b.used[in] {
			panic(fmt.Sprintf("onnxgraph: %s node in graph %s reads %q before it exists", op, b.name, in))
		}
	}
	// A node is named after its first output, which is unique and, where
	// the exporter names values after the model's points, stable.
	name := outputs[0] + "/" + op
	b.nodes = append(b.nodes, &onnxpb.NodeProto{
		Input: inputs, Output: outputs, Name: proto.String(name), OpType: proto.String(op), Attribute: attrs,
	})
}

// Initializer adds a weight named name with the given type, shape and data
// (data.Size() must equal the product of shape times the element size).
func (b *Builder) Initializer(name string, dt DType, shape []int64, data Data) string {
	n := int64(dt.Size())
	for _, d := range shape {
		n *= d
	}
	if data.Size() != n {
		panic(fmt.Sprintf("onnxgraph: initializer %s %v %s has %d bytes, want %d", name, shape, dt, data.Size(), n))
	}
	t := &onnxpb.TensorProto{Dims: append([]int64{}, shape...), DataType: proto.Int32(int32(dt)), Name: proto.String(b.claim(name))}
	b.inits = append(b.inits, initializer{t: t, data: data})
	return name
}

// Float32s adds a weight from float32 values, stored as the builder's
// float type (rounded to nearest even for float16).
func (b *Builder) Float32s(name string, shape []int64, v []float32) string {
	return b.Initializer(name, b.Float, shape, FloatData(v, b.Float))
}

// Int64s adds a 1-D int64 constant with an invented name; equal constants
// are shared.
func (b *Builder) Int64s(v ...int64) string {
	key := fmt.Sprintf("i64%v", v)
	if n, ok := b.consts[key]; ok {
		return n
	}
	name := b.Initializer(b.constName("const_i64"), Int64, []int64{int64(len(v))}, Int64Data(v))
	b.consts[key] = name
	return name
}

// Scalar adds a float constant of shape [1] in the builder's float type;
// equal constants are shared.
func (b *Builder) Scalar(v float64) string {
	key := fmt.Sprintf("f%d:%x", b.Float, math.Float64bits(v))
	if n, ok := b.consts[key]; ok {
		return n
	}
	name := b.Initializer(b.constName("const_f"), b.Float, []int64{1}, FloatData([]float32{float32(v)}, b.Float))
	b.consts[key] = name
	return name
}

func (b *Builder) constName(stem string) string {
	for {
		n := b.counter[stem]
		b.counter[stem] = n + 1
		name := fmt.Sprintf("%s_%d", stem, n)
		if !b.used[name] {
			return name
		}
	}
}

func valueInfo(v ValueInfo) *onnxpb.ValueInfoProto {
	dims := make([]*onnxpb.TensorShapeProto_Dimension, len(v.Shape))
	for i, d := range v.Shape {
		dims[i] = &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}}
	}
	tt := &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(v.DType))}
	if v.Shape != nil { // nil: unknown shape (debug outputs only; exports are static)
		tt.Shape = &onnxpb.TensorShapeProto{Dim: dims}
	}
	return &onnxpb.ValueInfoProto{
		Name: proto.String(v.Name),
		Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: tt}},
	}
}
