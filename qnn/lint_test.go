package qnn

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"sparkconv/onnxgraph"
	"sparkconv/onnxpb"

	"google.golang.org/protobuf/proto"
)

const sqrt2 = float32(math.Sqrt2)

// rmsNorm appends Pow(x,2) -> ReduceMean(axes) -> Add(eps) -> Sqrt ->
// Div(x, .) -> Mul(w) (opset < 18: axes attribute).
func (b *tb) rmsNorm(x, w string, axes int64) string {
	sq := b.op("Pow", []string{x, b.f32(x+"_two", []int64{}, 2)})
	mean := b.op("ReduceMean", []string{sq}, aInts("axes", axes), aInt("keepdims", 1))
	s := b.op("Sqrt", []string{b.op("Add", []string{mean, b.f32(x+"_eps", []int64{1}, 1e-6)})})
	return b.op("Mul", []string{b.op("Div", []string{x, s}), w})
}

// gelu appends Div(x, sqrt2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5).
func (b *tb) gelu(x string) string {
	e := b.op("Erf", []string{b.op("Div", []string{x, b.f32(x+"_sqrt2", []int64{}, sqrt2)})})
	a := b.op("Add", []string{e, b.f32(x+"_one", []int64{}, 1)})
	return b.op("Mul", []string{b.op("Mul", []string{x, a}), b.f32(x+"_half", []int64{}, 0.5)})
}

// cleanLayer is a decode step written the way docs/formats.md#onnx-decode-step asks:
// RMSNorm pattern, query reshaped to [1,KV,.,D], transposed key cache,
// MatMul with matching batch dims, one Softmax on the last axis, exact GELU.
func cleanLayer() *tb {
	b := newTB(17)
	x := b.in("hidden_in", tF32, 1, 1, 8)
	pk := b.in("past_key", tF32, 1, 2, 4, 3)
	pv := b.in("past_value", tF32, 1, 2, 3, 4)
	mask := b.in("attention_mask", tF32, 1, 1, 1, 3)
	b.opTo("hidden_out", "Identity", []string{b.layer("", x, pk, pv, mask)})
	b.out("hidden_out", tF32, 1, 1, 8)
	return b
}

// layer appends one decode layer reading x [1,1,8]; p prefixes weight names.
func (b *tb) layer(p, x, pk, pv, mask string) string {
	h := b.rmsNorm(x, b.f32(p+"norm_w", []int64{8}, ramp(8, 0.3)...), -1)
	q := b.op("MatMul", []string{h, b.f32(p+"wq", []int64{8, 8}, ramp(64, 0.1)...)})
	q = b.op("Transpose", []string{b.op("Reshape", []string{q, b.i64(p+"q_shape", []int64{4}, 1, 1, 2, 4)})}, aInts("perm", 0, 2, 1, 3))
	s := b.op("MatMul", []string{q, pk})
	s = b.op("Add", []string{b.op("Mul", []string{s, b.f32(p+"scale", []int64{1}, 0.5)}), mask})
	pr := b.op("Softmax", []string{s}, aInt("axis", -1))
	a := b.op("MatMul", []string{pr, pv})
	a = b.op("Reshape", []string{b.op("Transpose", []string{a}, aInts("perm", 0, 2, 1, 3)), b.i64(p+"o_shape", []int64{3}, 1, 1, 8)})
	return b.op("Add", []string{x, b.gelu(a)})
}

func TestLintCleanLayer(t *testing.T) {
	b := cleanLayer()
	if fs := Lint(b.m); len(fs) != 0 {
		t.Fatalf("clean layer: %v", fs)
	}
	// The graph is valid ONNX and runs: ORT is the judge.
	feeds := map[string]onnxgraph.Tensor{
		"hidden_in":      onnxgraph.F32Tensor([]int64{1, 1, 8}, ramp(8, 0.5)),
		"past_key":       onnxgraph.F32Tensor([]int64{1, 2, 4, 3}, ramp(24, 0.6)),
		"past_value":     onnxgraph.F32Tensor([]int64{1, 2, 3, 4}, ramp(24, 0.7)),
		"attention_mask": onnxgraph.F32Tensor([]int64{1, 1, 1, 3}, []float32{0, -10000, 0}),
	}
	out, err := runORT(t, marshal(t, b.m), feeds)
	if err != nil {
		t.Fatal(err)
	}
	if len(out["hidden_out"].F32) != 8 {
		t.Fatalf("hidden_out has %d values", len(out["hidden_out"].F32))
	}
}

// TestLintOnnxgraphPatterns lints graphs written with onnxgraph's own
// RMSNorm and GELU helpers (code this package did not write).
func TestLintOnnxgraphPatterns(t *testing.T) {
	b := onnxgraph.New("patterns", onnxgraph.Float32)
	x := b.Input("x", onnxgraph.Float32, 1, 1, 16)
	w := b.Float32s("w", []int64{16}, ramp(16, 0.2))
	b.OpTo("y", "Identity", []string{b.GELUErf("", b.RMSNorm("", x, w, 1e-6))})
	b.Output("y", onnxgraph.Float32, 1, 1, 16)
	m, err := b.Proto()
	if err != nil {
		t.Fatal(err)
	}
	if fs := Lint(m); len(fs) != 0 {
		t.Errorf("onnxgraph RMSNorm+GELU: %v", fs)
	}
}

type lintCase struct {
	name  string
	build func() *tb
	rule  string
	sev   Severity // checked when n > 0
	n     int      // findings of rule expected
}

func single(op string, inDims, outDims []int64, attrs ...*onnxpb.AttributeProto) func() *tb {
	return func() *tb {
		b := newTB(17)
		x := b.in("x", tF32, inDims...)
		b.opTo("y", op, []string{x}, attrs...)
		b.out("y", tF32, outDims...)
		return b
	}
}

func versionCases() []lintCase {
	ir := func(v *int64) func() *tb {
		return func() *tb { b := single("Relu", []int64{2}, []int64{2})(); b.m.IrVersion = v; return b }
	}
	opset := func(v int64) func() *tb {
		return func() *tb {
			b := newTB(v)
			b.opTo("y", "Relu", []string{b.in("x", tF32, 2)})
			b.out("y", tF32, 2)
			return b
		}
	}
	return []lintCase{
		{"ir missing", ir(nil), "ir-version-missing", Error, 1},
		{"ir 8", ir(proto.Int64(8)), "ir-version-missing", "", 0},
		{"ir 12", ir(proto.Int64(12)), "ir-version-too-new", Error, 1},
		{"ir 11", ir(proto.Int64(11)), "ir-version-too-new", "", 0},
		{"no opset", func() *tb { b := opset(17)(); b.m.OpsetImport = nil; return b }, "opset-missing", Error, 1},
		{"only a custom-domain opset", func() *tb {
			b := opset(17)()
			b.m.OpsetImport[0].Domain = proto.String("com.microsoft")
			return b
		}, "opset-missing", Error, 1},
		{"opset 17", opset(17), "opset-missing", "", 0},
		{"opset 24", opset(24), "opset-too-new", Error, 1},
		{"opset 23", opset(23), "opset-too-new", "", 0},
	}
}

func opCases() []lintCase {
	return []lintCase{
		{"RMSNormalization", single("RMSNormalization", []int64{1, 4}, []int64{1, 4}), "unsupported-op", Error, 1},
		{"com.microsoft Gelu", func() *tb {
			b := single("Gelu", []int64{4}, []int64{4})()
			b.g.Node[0].Domain = proto.String("com.microsoft")
			return b
		}, "unsupported-op", Error, 1},
		{"Relu", single("Relu", []int64{4}, []int64{4}), "unsupported-op", "", 0},
		{"LayerNormalization", func() *tb {
			b := newTB(17)
			b.opTo("y", "LayerNormalization", []string{b.in("x", tF32, 1, 4), b.f32("g", []int64{4}, 1, 1, 1, 1)}, aInt("axis", -1))
			b.out("y", tF32, 1, 4)
			return b
		}, "unsupported-op", "", 0},
	}
}

// geluVariant builds x -> GELU with the given operand orders.
func geluVariant(divConst float32, swapDiv, addOneFirst, mulXSecond, halfFirst, mulForm bool) func() *tb {
	return func() *tb {
		b := newTB(17)
		x := b.in("x", tF32, 1, 4)
		var d string
		if mulForm {
			d = b.op("Mul", []string{x, b.f32("c", []int64{1}, divConst)})
		} else if swapDiv {
			d = b.op("Div", []string{b.f32("c", []int64{}, divConst), x})
		} else {
			d = b.op("Div", []string{x, b.f32("c", []int64{}, divConst)})
		}
		e := b.op("Erf", []string{d})
		one := b.f32("one", []int64{}, 1)
		a := b.op("Add", []string{e, one})
		if addOneFirst {
			b.g.Node[len(b.g.Node)-1].Input = []string{one, e}
		}
		half := b.f32("half", []int64{}, 0.5)
		var y string
		if halfFirst { // (0.5 * x) * (1 + erf): QNN EP pattern 1
			h := b.op("Mul", []string{half, x})
			y = b.op("Mul", []string{a, h})
		} else {
			m := b.op("Mul", []string{x, a})
			if mulXSecond {
				b.g.Node[len(b.g.Node)-1].Input = []string{a, x}
			}
			y = b.op("Mul", []string{half, m})
		}
		b.opTo("y", "Identity", []string{y})
		b.out("y", tF32, 1, 4)
		return b
	}
}

func geluCases() []lintCase {
	return []lintCase{
		{"lone Erf", single("Erf", []int64{4}, []int64{4}), "erf-outside-gelu", Error, 1},
		{"gelu canonical", geluVariant(sqrt2, false, false, false, false, false), "erf-outside-gelu", "", 0},
		{"gelu Add(1,e) Mul(a,x) Mul(0.5,m)", geluVariant(sqrt2, false, true, true, false, false), "erf-outside-gelu", "", 0},
		{"gelu (0.5x)(1+erf)", geluVariant(sqrt2, false, false, false, true, false), "erf-outside-gelu", "", 0},
		{"gelu Div(sqrt2, x)", geluVariant(sqrt2, true, false, false, false, false), "erf-outside-gelu", Error, 1},
		{"gelu Div(x, 1.5)", geluVariant(1.5, false, false, false, false, false), "erf-outside-gelu", Error, 1},
		{"gelu Mul(x, 1/sqrt2)", geluVariant(float32(1/math.Sqrt2), false, false, false, false, true), "erf-gelu-variant", Warning, 1},
		{"gelu Div form is no variant", geluVariant(sqrt2, false, false, false, false, false), "erf-gelu-variant", "", 0},
		{"gelu Mul(x, 1/sqrt2) is not outside", geluVariant(float32(1/math.Sqrt2), false, false, false, false, true), "erf-outside-gelu", "", 0},
		{"gelu intermediate read twice", func() *tb {
			b := geluVariant(sqrt2, false, false, false, false, false)()
			b.opTo("y2", "Identity", []string{"Erf_1"})
			b.out("y2", tF32, 1, 4)
			return b
		}, "erf-outside-gelu", Error, 1},
	}
}

// rmsVariant builds an RMSNorm of x [1,2,8] with one deviation.
func rmsVariant(kind string) func() *tb {
	return func() *tb {
		b := newTB(17)
		x := b.in("x", tF32, 1, 2, 8)
		w := b.f32("w", []int64{8}, ramp(8, 0.1)...)
		var sq string
		if kind == "mulxx" {
			sq = b.op("Mul", []string{x, x})
		} else {
			sq = b.op("Pow", []string{x, b.f32("two", []int64{}, 2)})
		}
		axis := int64(-1)
		if kind == "axis1" {
			axis = 1
		}
		if kind == "axis2" {
			axis = 2
		}
		v := b.op("ReduceMean", []string{sq}, aInts("axes", axis), aInt("keepdims", 1))
		if kind != "noeps" {
			v = b.op("Add", []string{b.f32("eps", []int64{1}, 1e-6), v})
		}
		var n string
		switch kind {
		case "reciprocal":
			n = b.op("Mul", []string{x, b.op("Reciprocal", []string{b.op("Sqrt", []string{v})})})
		case "oneover":
			n = b.op("Mul", []string{b.op("Div", []string{b.f32("one", []int64{}, 1), b.op("Sqrt", []string{v})}), x})
		case "powhalf":
			n = b.op("Mul", []string{x, b.op("Pow", []string{v, b.f32("mhalf", []int64{}, -0.5)})})
		default:
			n = b.op("Div", []string{x, b.op("Sqrt", []string{v})})
		}
		if kind != "noweight" {
			n = b.op("Mul", []string{w, n})
		}
		b.opTo("y", "Identity", []string{n})
		b.out("y", tF32, 1, 2, 8)
		return b
	}
}

func rmsCases() []lintCase {
	return []lintCase{
		{"rms canonical", rmsVariant(""), "rmsnorm-pattern", "", 0},
		{"rms axes=[2] of rank 3", rmsVariant("axis2"), "rmsnorm-pattern", "", 0},
		{"rms Mul(x,x)", rmsVariant("mulxx"), "rmsnorm-pattern", Warning, 1},
		{"rms Reciprocal", rmsVariant("reciprocal"), "rmsnorm-pattern", Warning, 1},
		{"rms Div(1,.)*x", rmsVariant("oneover"), "rmsnorm-pattern", Warning, 1},
		{"rms no weight", rmsVariant("noweight"), "rmsnorm-pattern", Warning, 1},
		{"rms no eps", rmsVariant("noeps"), "rmsnorm-pattern", Error, 1},
		{"rms axis 1", rmsVariant("axis1"), "rmsnorm-pattern", Error, 1},
		{"rms Pow(-0.5)", rmsVariant("powhalf"), "rmsnorm-pattern", Error, 1},
		{"rms opset 18 axes input", func() *tb {
			b := newTB(18)
			x := b.in("x", tF32, 1, 8)
			sq := b.op("Pow", []string{x, b.f32("two", []int64{1}, 2)})
			v := b.op("ReduceMean", []string{sq, b.i64("ax", []int64{1}, -1)})
			n := b.op("Div", []string{x, b.op("Sqrt", []string{b.op("Add", []string{v, b.f32("eps", []int64{}, 1e-5)})})})
			b.opTo("y", "Mul", []string{n, b.f32("w", []int64{8}, ramp(8, 0.4)...)})
			b.out("y", tF32, 1, 8)
			return b
		}, "rmsnorm-pattern", "", 0},
	}
}

func softmaxCases() []lintCase {
	sm := func(opset int64, dims []int64, attrs ...*onnxpb.AttributeProto) func() *tb {
		return func() *tb {
			b := newTB(opset)
			b.opTo("y", "Softmax", []string{b.in("x", tF32, dims...)}, attrs...)
			b.out("y", tF32, dims...)
			return b
		}
	}
	return []lintCase{
		{"softmax axis 1 of rank 3", sm(17, []int64{2, 3, 4}, aInt("axis", 1)), "softmax-axis", Error, 1},
		{"softmax axis -1", sm(17, []int64{2, 3, 4}, aInt("axis", -1)), "softmax-axis", "", 0},
		{"softmax opset 13 default", sm(13, []int64{2, 3, 4}), "softmax-axis", "", 0},
		{"softmax opset 11 default axis", sm(11, []int64{1, 2, 3, 4}), "softmax-axis", Error, 1},
		{"softmax opset 11 axis 3", sm(11, []int64{1, 2, 3, 4}, aInt("axis", 3)), "softmax-axis", "", 0},
		{"softmax unknown rank axis 0", func() *tb {
			b := newTB(17)
			x := b.in("x", tF32, 2, 3)
			b.g.Input[0].Type.GetTensorType().Shape = nil
			b.opTo("y", "Softmax", []string{x}, aInt("axis", 0))
			b.out("y", tF32, 2, 3)
			return b
		}, "softmax-axis", Warning, 1},
	}
}

func guardModel(zero float32, sameX bool) func() *tb {
	return func() *tb {
		b := newTB(17)
		x := b.in("x", tF32, 2, 3)
		x2 := b.in("x2", tF32, 2, 3)
		other := x
		if !sameX {
			other = x2
		}
		b.opTo("y", "Where", []string{b.op("IsNaN", []string{x}), b.f32("z", []int64{}, zero), other})
		b.opTo("y2", "Identity", []string{x2})
		b.out("y", tF32, 2, 3)
		b.out("y2", tF32, 2, 3)
		return b
	}
}

func guardCases() []lintCase {
	return []lintCase{
		{"guard", guardModel(0, true), "isnan-guard", Error, 1},
		{"guard is not isnan", guardModel(0, true), "isnan", "", 0},
		{"Where(IsNaN(x), 1, x)", guardModel(1, true), "isnan", Error, 1},
		{"Where(IsNaN(x), 1, x) not a guard", guardModel(1, true), "isnan-guard", "", 0},
		{"Where(IsNaN(x), 0, x2)", guardModel(0, false), "isnan", Error, 1},
		{"IsNaN as output", func() *tb {
			b := newTB(17)
			b.opTo("y", "IsNaN", []string{b.in("x", tF32, 2)})
			b.out("y", tBool, 2)
			return b
		}, "isnan", Error, 1},
	}
}

func reshapeCases() []lintCase {
	rs := func(allowZero int64, shapeInput bool) func() *tb {
		return func() *tb {
			b := newTB(17)
			x := b.in("x", tF32, 2, 3)
			sh := b.i64("sh", []int64{2}, 3, 2)
			if shapeInput {
				sh = b.in("sh_in", tI64, 2)
			}
			b.opTo("y", "Reshape", []string{x, sh}, aInt("allowzero", allowZero))
			b.out("y", tF32, 3, 2)
			return b
		}
	}
	return []lintCase{
		{"allowzero=1", rs(1, false), "reshape-allowzero", Error, 1},
		{"allowzero=0", rs(0, false), "reshape-allowzero", "", 0},
		{"runtime shape", rs(0, true), "shape-not-constant", Error, 1},
		{"constant shape", rs(0, false), "shape-not-constant", "", 0},
	}
}

func axesCases() []lintCase {
	unsq := func(opset int64, axes func(b *tb) string) func() *tb {
		return func() *tb {
			b := newTB(opset)
			x := b.in("x", tF32, 3)
			if opset < 13 {
				b.opTo("y", "Unsqueeze", []string{x}, aInts("axes", 0))
			} else {
				b.opTo("y", "Unsqueeze", []string{x, axes(b)})
			}
			b.out("y", tF32, 1, 3)
			return b
		}
	}
	return []lintCase{
		{"rank-0 axes initializer", unsq(13, func(b *tb) string { return b.i64("ax", []int64{}, 0) }), "scalar-axes", Error, 1},
		{"rank-0 axes Constant", unsq(13, func(b *tb) string { return b.op("Constant", nil, aInt("value_int", 0)) }), "scalar-axes", Error, 1},
		{"1-D axes", unsq(13, func(b *tb) string { return b.i64("ax", []int64{1}, 0) }), "scalar-axes", "", 0},
		{"axes attribute (opset 11)", unsq(11, nil), "scalar-axes", "", 0},
		{"runtime axes", unsq(13, func(b *tb) string { return b.in("ax", tI64, 1) }), "axes-not-constant", Error, 1},
		{"constant axes", unsq(13, func(b *tb) string { return b.i64("ax", []int64{1}, 0) }), "axes-not-constant", "", 0},
		{"ReduceSum rank-0 axes", func() *tb {
			b := newTB(13)
			b.opTo("y", "ReduceSum", []string{b.in("x", tF32, 2, 3), b.i64("ax", []int64{}, 1)})
			b.out("y", tF32, 2, 1)
			return b
		}, "scalar-axes", Error, 1},
	}
}

func ioCases() []lintCase {
	return []lintCase{
		{"dim_param input", func() *tb {
			b := single("Relu", []int64{1, 4}, []int64{1, 4})()
			b.g.Input[0].Type.GetTensorType().Shape.Dim[0].Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "batch"}
			return b
		}, "dynamic-shape", Error, 1},
		{"output without shape", func() *tb {
			b := single("Relu", []int64{1, 4}, []int64{1, 4})()
			b.g.Output[0].Type.GetTensorType().Shape = nil
			return b
		}, "dynamic-shape", Error, 1},
		{"dim without value", func() *tb {
			b := single("Relu", []int64{1, 4}, []int64{1, 4})()
			b.g.Input[0].Type.GetTensorType().Shape.Dim[1].Value = nil
			return b
		}, "dynamic-shape", Error, 1},
		{"static io", single("Relu", []int64{1, 4}, []int64{1, 4}), "dynamic-shape", "", 0},
		{"initializer listed as input", func() *tb {
			b := newTB(17)
			x := b.in("x", tF32, 4)
			w := b.f32("w", []int64{4}, 1, 2, 3, 4)
			b.g.Input = append(b.g.Input, &onnxpb.ValueInfoProto{Name: proto.String(w)})
			b.opTo("y", "Add", []string{x, w})
			b.out("y", tF32, 4)
			return b
		}, "dynamic-shape", "", 0},
	}
}

func boolCases() []lintCase {
	return []lintCase{
		{"BOOL input", func() *tb {
			b := newTB(17)
			m := b.in("mask", tBool, 1, 4)
			b.opTo("y", "Where", []string{m, b.in("x", tF32, 1, 4), b.f32("neg", []int64{}, -10000)})
			b.out("y", tF32, 1, 4)
			return b
		}, "bool-mask", Error, 1},
		{"Cast to bool", single("Cast", []int64{4}, []int64{4}, aInt("to", int64(tBool))), "bool-mask", Error, 1},
		{"comparison feeds Where", func() *tb {
			b := newTB(17)
			x := b.in("x", tF32, 4)
			c := b.op("Less", []string{x, b.f32("zero", []int64{}, 0)})
			b.opTo("y", "Where", []string{c, b.f32("neg", []int64{}, -10000), x})
			b.out("y", tF32, 4)
			return b
		}, "bool-mask", Error, 1},
		{"BOOL initializer", func() *tb {
			b := newTB(17)
			b.g.Initializer = append(b.g.Initializer, &onnxpb.TensorProto{Name: proto.String("m"), DataType: proto.Int32(int32(tBool)),
				Dims: []int64{1}, Int32Data: []int32{1}})
			b.opTo("y", "Where", []string{"m", b.in("x", tF32, 4), b.f32("z", []int64{}, 0)})
			b.out("y", tF32, 4)
			return b
		}, "bool-mask", Error, 1},
		{"float additive mask", func() *tb {
			b := newTB(17)
			b.opTo("y", "Add", []string{b.in("x", tF32, 4), b.in("mask", tF32, 4)})
			b.out("y", tF32, 4)
			return b
		}, "bool-mask", "", 0},
	}
}

func attentionCases() []lintCase {
	explicit := func(withMax bool) func() *tb {
		return func() *tb {
			b := newTB(17)
			x := b.in("x", tF32, 2, 5)
			v := x
			if withMax {
				v = b.op("Sub", []string{x, b.op("ReduceMax", []string{x}, aInts("axes", -1))})
			}
			e := b.op("Exp", []string{v})
			b.opTo("y", "Div", []string{e, b.op("ReduceSum", []string{e, b.i64("ax", []int64{1}, -1)})})
			b.out("y", tF32, 2, 5)
			return b
		}
	}
	mulSum := func(aDims, bDims []int64, declare bool) func() *tb {
		return func() *tb {
			b := newTB(17)
			q, k := b.in("q", tF32, aDims...), b.in("k", tF32, bDims...)
			if !declare {
				b.g.Input[0].Type.GetTensorType().Shape = nil
			}
			b.opTo("y", "ReduceSum", []string{b.op("Mul", []string{q, k}), b.i64("ax", []int64{1}, -1)})
			b.out("y", tF32, 1, 2, 4, 1)
			return b
		}
	}
	mm := func(aDims, bDims, outDims []int64) func() *tb {
		return func() *tb {
			b := newTB(17)
			b.opTo("y", "MatMul", []string{b.in("a", tF32, aDims...), b.in("b", tF32, bDims...)})
			b.out("y", tF32, outDims...)
			return b
		}
	}
	return []lintCase{
		{"max/exp/sum/div softmax", explicit(true), "explicit-softmax", Error, 1},
		{"exp/sum/div softmax", explicit(false), "explicit-softmax", Error, 1},
		{"lone Exp", single("Exp", []int64{4}, []int64{4}), "explicit-softmax", "", 0},
		{"broadcast Mul+ReduceSum", mulSum([]int64{1, 2, 1, 8}, []int64{1, 2, 4, 8}, true), "broadcast-mul-reducesum", Error, 1},
		{"same-shape Mul+ReduceSum", mulSum([]int64{1, 2, 4, 8}, []int64{1, 2, 4, 8}, true), "broadcast-mul-reducesum", "", 0},
		{"unknown-shape Mul+ReduceSum", mulSum([]int64{1, 2, 1, 8}, []int64{1, 2, 4, 8}, false), "broadcast-mul-reducesum", Warning, 1},
		{"MatMul broadcast batch", mm([]int64{1, 8, 1, 4}, []int64{1, 2, 4, 5}, []int64{1, 8, 1, 5}), "matmul-batch", Error, 1},
		{"MatMul rank 4 vs 3", mm([]int64{1, 2, 1, 4}, []int64{2, 4, 5}, []int64{1, 2, 1, 5}), "matmul-batch", Error, 1},
		{"MatMul inner mismatch", mm([]int64{1, 2, 1, 4}, []int64{1, 2, 3, 5}, []int64{1, 2, 1, 5}), "matmul-batch", Error, 1},
		{"MatMul matching batch", mm([]int64{1, 2, 1, 4}, []int64{1, 2, 4, 5}, []int64{1, 2, 1, 5}), "matmul-batch", "", 0},
		{"MatMul by 2-D weight", mm([]int64{1, 3, 4}, []int64{4, 5}, []int64{1, 3, 5}), "matmul-batch", "", 0},
		{"MatMul shapes inferred", func() *tb {
			// q reshaped to [1,8,1,4] then multiplied by k [1,2,4,5]: the
			// broadcast is only visible through Reshape/Transpose inference.
			b := newTB(17)
			q := b.op("Reshape", []string{b.in("q", tF32, 1, 1, 32), b.i64("s", []int64{4}, 1, 1, 8, 4)})
			q = b.op("Transpose", []string{q}, aInts("perm", 0, 2, 1, 3))
			b.opTo("y", "MatMul", []string{q, b.in("k", tF32, 1, 2, 4, 5)})
			b.out("y", tF32, 1, 8, 1, 5)
			return b
		}, "matmul-batch", Error, 1},
	}
}

func TestLintRules(t *testing.T) {
	var all []lintCase
	for _, cs := range [][]lintCase{versionCases(), opCases(), geluCases(), rmsCases(), softmaxCases(), guardCases(),
		reshapeCases(), axesCases(), ioCases(), boolCases(), attentionCases(), topologyCases(), weightCases()} {
		all = append(all, cs...)
	}
	tested := map[string]bool{}
	for _, c := range all {
		t.Run(c.name, func(t *testing.T) {
			fs := Lint(c.build().m)
			got := findings(fs, c.rule)
			if len(got) != c.n {
				t.Fatalf("%d %s findings, want %d; all findings: %v", len(got), c.rule, c.n, fs)
			}
			for _, f := range got {
				if f.Severity != c.sev {
					t.Errorf("severity %s, want %s: %v", f.Severity, c.sev, f)
				}
				if f.Message == "" || f.Fix == "" {
					t.Errorf("finding without message or fix: %+v", f)
				}
			}
		})
		if c.n > 0 {
			tested[c.rule+"+"] = true
		} else {
			tested[c.rule+"-"] = true
		}
	}
	// Every rule has a case that triggers it and one that does not.
	for _, r := range Rules() {
		if r.ID == "no-graph" {
			continue
		}
		if !tested[r.ID+"+"] || !tested[r.ID+"-"] {
			t.Errorf("rule %s lacks a triggering or a clean case", r.ID)
		}
	}
}

func TestLintNoGraph(t *testing.T) {
	for _, m := range []*onnxpb.ModelProto{nil, {}} {
		fs := Lint(m)
		if len(fs) != 1 || fs[0].Rule != "no-graph" || fs[0].Severity != Error {
			t.Errorf("Lint(%v) = %v", m, fs)
		}
	}
}

func TestFindingFormat(t *testing.T) {
	fs := Lint(guardModel(0, true)().m)
	if len(fs) != 1 {
		t.Fatalf("findings %v", fs)
	}
	want := "error [isnan-guard] node n1_Where (Where): Where(IsNaN(x), 0, x) guard (IsNaN has no converter translation). " +
		"Fix: run `sparkconv sanitize` to remove it (harmless with a finite additive mask), or export SDPA with a float mask"
	if s := fs[0].String(); s != want {
		t.Errorf("String() =\n%s\nwant\n%s", s, want)
	}
	b, err := json.Marshal(fs[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"rule":"isnan-guard"`, `"severity":"error"`, `"node":"n1_Where"`, `"op":"Where"`, `"node_index":1`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("JSON %s lacks %s", b, key)
		}
	}
	if e, w := Count(Lint(rmsVariant("mulxx")().m)); e != 0 || w != 1 {
		t.Errorf("Count = %d errors, %d warnings; want 0, 1", e, w)
	}
}

func TestOpsTable(t *testing.T) {
	ops := Ops()
	for i := 1; i < len(ops); i++ {
		if ops[i-1].Op >= ops[i].Op {
			t.Errorf("table not sorted or duplicate at %s", ops[i].Op)
		}
	}
	for _, op := range []string{"MatMul", "Softmax", "Erf", "Where", "Pow", "ReduceMean", "Sqrt", "Div", "Reshape", "Unsqueeze", "Concat", "Split", "Gather"} {
		if !SupportedOp("", op) {
			t.Errorf("%s missing from the table", op)
		}
	}
	for op := range excludedOps {
		if SupportedOp("", op) {
			t.Errorf("%s is both supported and excluded", op)
		}
	}
	if SupportedOp("com.microsoft", "MatMul") || !SupportedOp("ai.onnx", "MatMul") {
		t.Error("domain handling wrong")
	}
}
