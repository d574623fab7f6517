package qnn

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"sparkconv/onnxgraph"
	"sparkconv/onnxio"
	"sparkconv/onnxpb"

	"google.golang.org/protobuf/proto"
)

// dynamoModel is a small attention block the way torch.onnx(dynamo=True)
// writes it: an IsNaN/Where guard after the softmax, Reshape allowzero=1
// (aten::view) and rank-0 axes, one of them shared with a non-axes reader.
//
//	q [1,2,3,4] x k [1,2,4,5] + mask [1,1,3,5] -> Softmax -> guard -> Reshape [1,2,15] (allowzero=1)
//	-> Unsqueeze(axes=ax0, rank 0) -> y [1,1,2,15];  y2 = y + Cast(ax0)
//	p -> Squeeze(axes=Constant(value_int=0)) -> z [2,3,5]
func dynamoModel() *tb {
	b := newTB(18)
	q := b.in("q", tF32, 1, 2, 3, 4)
	k := b.in("k", tF32, 1, 2, 4, 5)
	mask := b.in("mask", tF32, 1, 1, 3, 5)
	s := b.op("Add", []string{b.op("MatMul", []string{q, k}), mask})
	p := b.op("Softmax", []string{s}, aInt("axis", -1))
	zero := b.op("Constant", nil, aTensor("value", &onnxpb.TensorProto{DataType: proto.Int32(int32(tF32)), FloatData: []float32{0}}))
	w := b.op("Where", []string{b.op("IsNaN", []string{p}), zero, p})
	r := b.op("Reshape", []string{w, b.i64("view_shape", []int64{3}, 1, 2, 15)}, aInt("allowzero", 1))
	ax0 := b.i64("ax0", []int64{}, 1)
	b.opTo("y", "Unsqueeze", []string{r, ax0})
	b.opTo("y2", "Add", []string{"y", b.op("Cast", []string{ax0}, aInt("to", int64(tF32)))})
	c := b.op("Constant", nil, aInt("value_int", 0))
	b.opTo("z", "Squeeze", []string{p, c})
	b.out("y2", tF32, 1, 1, 2, 15)
	b.out("z", tF32, 2, 3, 5)
	return b
}

func dynamoFeeds() map[string]onnxgraph.Tensor {
	mask := make([]float32, 15)
	for i := range mask {
		if i%5 == 4 { // one masked key per query, finite like mask_value
			mask[i] = -10000
		}
	}
	return map[string]onnxgraph.Tensor{
		"q":    onnxgraph.F32Tensor([]int64{1, 2, 3, 4}, ramp(24, 0.1)),
		"k":    onnxgraph.F32Tensor([]int64{1, 2, 4, 5}, ramp(40, 0.3)),
		"mask": onnxgraph.F32Tensor([]int64{1, 1, 3, 5}, mask),
	}
}

func TestSanitizeDynamoModel(t *testing.T) {
	m := dynamoModel().m
	orig := proto.Clone(m).(*onnxpb.ModelProto)
	before := Lint(m)
	for _, rule := range []string{"isnan-guard", "reshape-allowzero", "scalar-axes"} {
		if len(findings(before, rule)) == 0 {
			t.Errorf("lint before sanitize: no %s finding in %v", rule, before)
		}
	}
	changes, err := Sanitize(m)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, c := range changes {
		kinds[c.Kind]++
	}
	// guard, IsNaN + zero Constant, allowzero, ax0 copied (Cast reads it), Constant in place.
	want := map[string]int{"remove-isnan-guard": 1, "remove-node": 2, "set-allowzero": 1, "axes-to-1d": 2}
	for k, v := range want {
		if kinds[k] != v {
			t.Errorf("%d %s changes, want %d (all: %v)", kinds[k], k, v, changes)
		}
	}
	if fs := Lint(m); len(fs) != 0 {
		t.Errorf("lint after sanitize: %v", fs)
	}
	for _, n := range m.GetGraph().GetNode() {
		if op := n.GetOpType(); op == "IsNaN" || op == "Where" {
			t.Errorf("%s node %s left in the graph", op, n.GetName())
		}
	}
	// ax0 keeps rank 0 for the Cast; the Unsqueeze reads a 1-D copy.
	var ax0, ax1d *onnxpb.TensorProto
	for _, in := range m.GetGraph().GetInitializer() {
		switch in.GetName() {
		case "ax0":
			ax0 = in
		case "ax0_1d":
			ax1d = in
		}
	}
	if ax0 == nil || len(ax0.GetDims()) != 0 || ax1d == nil || len(ax1d.GetDims()) != 1 || ax1d.GetInt64Data()[0] != 1 {
		t.Errorf("ax0 = %v, ax0_1d = %v", ax0, ax1d)
	}

	// ONNX Runtime rejects the original's rank-0 Squeeze axes; the
	// sanitized model runs. y2 is compared with the original's y2 computed
	// by ORT on a copy whose Squeeze branch is cut; z with a Go reference.
	if _, err := runORT(t, marshal(t, orig), dynamoFeeds()); err == nil || !strings.Contains(err.Error(), "vector tensor") {
		t.Fatalf("original ran in ORT (err %v); expected the rank-0 Squeeze axes to be refused", err)
	}
	got, err := runORT(t, marshal(t, m), dynamoFeeds())
	if err != nil {
		t.Fatalf("sanitized model in ORT: %v", err)
	}
	cut := proto.Clone(orig).(*onnxpb.ModelProto)
	cut.Graph.Output = cut.Graph.Output[:1]
	cut.Graph.Node = cut.Graph.Node[:len(cut.Graph.Node)-2]
	ref, err := runORT(t, marshal(t, cut), dynamoFeeds())
	if err != nil {
		t.Fatalf("original without its Squeeze branch in ORT: %v", err)
	}
	if len(got["y2"].F32) != 30 || len(got["z"].F32) != 30 {
		t.Fatalf("outputs y2 %d values, z %d values; want 30 each", len(got["y2"].F32), len(got["z"].F32))
	}
	if !equalBits(got["y2"].F32, ref["y2"].F32) {
		t.Errorf("y2 differs:\n got %v\nwant %v", got["y2"].F32, ref["y2"].F32)
	}
	if !equalBits(got["z"].F32, softmaxRef(dynamoFeeds())) {
		t.Errorf("z differs from the float64 softmax reference beyond rounding")
	}
}

// softmaxRef computes softmax(q k + mask) in float64, rounded to float32,
// and checks it against got within 2 ulp-ish; here it returns the values.
func softmaxRef(f map[string]onnxgraph.Tensor) []float32 {
	q, k, mask := f["q"].F32, f["k"].F32, f["mask"].F32
	out := make([]float32, 30)
	for h := 0; h < 2; h++ {
		for i := 0; i < 3; i++ {
			var s [5]float64
			mx := math.Inf(-1)
			for j := 0; j < 5; j++ {
				for d := 0; d < 4; d++ {
					s[j] += float64(q[h*12+i*4+d]) * float64(k[h*20+d*5+j])
				}
				s[j] += float64(mask[i*5+j])
				mx = math.Max(mx, s[j])
			}
			var sum float64
			for j := range s {
				s[j] = math.Exp(s[j] - mx)
				sum += s[j]
			}
			for j := range s {
				out[h*15+i*5+j] = float32(s[j] / sum)
			}
		}
	}
	return out
}

// equalBits compares float32 slices; for the softmax reference it allows
// 4e-7 absolute (float32 accumulation order), elsewhere it is exact.
func equalBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && math.Abs(float64(a[i])-float64(b[i])) > 4e-7 {
			return false
		}
	}
	return true
}

// TestSanitizeKeepsOutputs runs original and sanitized models in ORT where
// ORT accepts both, and requires bit-identical outputs.
func TestSanitizeKeepsOutputs(t *testing.T) {
	cases := []struct {
		name  string
		build func() *tb
		feeds map[string]onnxgraph.Tensor
		kinds []string
	}{
		{"guard-internal", func() *tb {
			b := newTB(17)
			x := b.in("x", tF32, 2, 3, 4)
			p := b.op("Softmax", []string{x}, aInt("axis", -1))
			w := b.op("Where", []string{b.op("IsNaN", []string{p}), b.f32("zero", []int64{}, 0), p})
			b.opTo("y", "Mul", []string{w, b.f32("two", []int64{1}, 2)})
			b.out("y", tF32, 2, 3, 4)
			return b
		}, map[string]onnxgraph.Tensor{"x": onnxgraph.F32Tensor([]int64{2, 3, 4}, ramp(24, 0.7))},
			[]string{"remove-isnan-guard", "remove-node", "remove-initializer"}},
		{"guard-is-graph-output", func() *tb {
			b := newTB(17)
			x := b.in("x", tF32, 2, 4)
			p := b.op("Softmax", []string{x}, aInt("axis", -1))
			b.opTo("y", "Where", []string{b.op("IsNaN", []string{p}), b.f32("zero", []int64{1}, 0), p})
			b.out("y", tF32, 2, 4)
			return b
		}, map[string]onnxgraph.Tensor{"x": onnxgraph.F32Tensor([]int64{2, 4}, ramp(8, 0.2))},
			[]string{"remove-isnan-guard", "remove-node", "remove-initializer"}},
		{"allowzero-constant-node", func() *tb {
			b := newTB(17)
			x := b.in("x", tF32, 2, 3, 4)
			sh := b.op("Constant", nil, aTensor("value", &onnxpb.TensorProto{DataType: proto.Int32(int32(tI64)), Dims: []int64{2}, Int64Data: []int64{-1, 6}}))
			b.opTo("y", "Reshape", []string{x, sh}, aInt("allowzero", 1))
			b.out("y", tF32, 4, 6)
			return b
		}, map[string]onnxgraph.Tensor{"x": onnxgraph.F32Tensor([]int64{2, 3, 4}, ramp(24, 0.5))},
			[]string{"set-allowzero"}},
		{"unsqueeze-rank0-in-place", func() *tb {
			b := newTB(13)
			x := b.in("x", tF32, 3, 4)
			b.opTo("y", "Unsqueeze", []string{x, b.i64("ax", []int64{}, -1)})
			b.opTo("y2", "Unsqueeze", []string{x, "ax"})
			b.out("y", tF32, 3, 4, 1)
			b.out("y2", tF32, 3, 4, 1)
			return b
		}, map[string]onnxgraph.Tensor{"x": onnxgraph.F32Tensor([]int64{3, 4}, ramp(12, 0.9))},
			[]string{"axes-to-1d"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := c.build().m
			orig := marshal(t, m)
			changes, err := Sanitize(m)
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, ch := range changes {
				kinds = append(kinds, ch.Kind)
			}
			if strings.Join(kinds, ",") != strings.Join(c.kinds, ",") {
				t.Errorf("changes %v, want kinds %v", changes, c.kinds)
			}
			if fs := Lint(m); len(fs) != 0 {
				t.Errorf("lint after sanitize: %v", fs)
			}
			want, err := runORT(t, orig, c.feeds)
			if err != nil {
				t.Fatalf("original in ORT: %v", err)
			}
			got, err := runORT(t, marshal(t, m), c.feeds)
			if err != nil {
				t.Fatalf("sanitized in ORT: %v", err)
			}
			if len(want) != len(c.build().g.GetOutput()) {
				t.Fatalf("ORT returned %d outputs", len(want))
			}
			for name, w := range want {
				g := got[name]
				if len(g.F32) != len(w.F32) {
					t.Fatalf("%s: %d values, want %d", name, len(g.F32), len(w.F32))
				}
				for i := range w.F32 {
					if math.Float32bits(g.F32[i]) != math.Float32bits(w.F32[i]) {
						t.Fatalf("%s[%d] = %v, original %v", name, i, g.F32[i], w.F32[i])
					}
				}
			}
		})
	}
}

// TestSanitizeReduceMeanAxes: ORT refuses ReduceMean-18 with rank-0 axes;
// after sanitizing it computes the mean over the last axis.
func TestSanitizeReduceMeanAxes(t *testing.T) {
	b := newTB(18)
	x := b.in("x", tF32, 2, 5)
	b.opTo("y", "ReduceMean", []string{x, b.i64("ax", []int64{}, -1)}, aInt("keepdims", 0))
	b.out("y", tF32, 2)
	feeds := map[string]onnxgraph.Tensor{"x": onnxgraph.F32Tensor([]int64{2, 5}, ramp(10, 0.4))}
	if _, err := runORT(t, marshal(t, b.m), feeds); err == nil {
		t.Fatal("ORT ran ReduceMean with rank-0 axes; the test premise changed")
	}
	if _, err := Sanitize(b.m); err != nil {
		t.Fatal(err)
	}
	got, err := runORT(t, marshal(t, b.m), feeds)
	if err != nil {
		t.Fatal(err)
	}
	xs := feeds["x"].F32
	for r := 0; r < 2; r++ {
		var s float64
		for c := 0; c < 5; c++ {
			s += float64(xs[r*5+c])
		}
		if d := math.Abs(float64(got["y"].F32[r]) - s/5); d > 1e-6 {
			t.Errorf("mean row %d = %v, want %v", r, got["y"].F32[r], s/5)
		}
	}
}

func TestSanitizeRefuses(t *testing.T) {
	cases := []struct {
		name, want string
		build      func() *tb
	}{
		{"zero-in-shape", "holds 0", func() *tb {
			b := newTB(17)
			x := b.in("x", tF32, 2, 3)
			b.opTo("y", "Reshape", []string{x, b.i64("sh", []int64{2}, 0, 3)}, aInt("allowzero", 1))
			b.out("y", tF32, 2, 3)
			return b
		}},
		{"dynamic-shape", "not a constant", func() *tb {
			b := newTB(17)
			x := b.in("x", tF32, 2, 3)
			sh := b.in("sh", tI64, 2)
			b.opTo("y", "Reshape", []string{x, sh}, aInt("allowzero", 1))
			b.out("y", tF32, 3, 2)
			return b
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := c.build().m
			before := marshal(t, m)
			_, err := Sanitize(m)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "n0_Reshape") {
				t.Fatalf("err = %v, want one naming n0_Reshape and %q", err, c.want)
			}
			if !bytes.Equal(before, marshal(t, m)) {
				t.Error("a refused model was modified")
			}
		})
	}
	if _, err := Sanitize(&onnxpb.ModelProto{}); err == nil {
		t.Error("a model without a graph was accepted")
	}
}

// TestSanitizeDeterministic: sanitizing the same input twice gives the same
// bytes, and a second pass changes nothing.
func TestSanitizeDeterministic(t *testing.T) {
	var outs [][]byte
	for range 2 {
		m := dynamoModel().m
		if _, err := Sanitize(m); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := onnxio.Encode(&buf, onnxio.Model{Proto: m}); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, buf.Bytes())
		again, err := Sanitize(m)
		if err != nil || len(again) != 0 {
			t.Errorf("second sanitize: %v, %v", again, err)
		}
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Error("two sanitize runs wrote different bytes")
	}
}

// TestSanitizeSharedConstantAxes: a rank-0 Constant read as axes and by
// another node is copied, not changed.
func TestSanitizeSharedConstantAxes(t *testing.T) {
	b := newTB(13)
	x := b.in("x", tI64, 3)
	c := b.op("Constant", nil, aInt("value_int", 0))
	b.opTo("y", "Unsqueeze", []string{x, c})
	b.opTo("s", "Add", []string{x, c})
	b.out("y", tI64, 1, 3)
	b.out("s", tI64, 3)
	m := b.m
	feeds := map[string]onnxgraph.Tensor{"x": onnxgraph.I64Tensor([]int64{3}, []int64{4, 5, 6})}
	want, err := runORT(t, marshal(t, m), feeds)
	if err != nil {
		t.Fatal(err)
	}
	changes, err := Sanitize(m)
	if err != nil || len(changes) != 1 || !strings.Contains(changes[0].Detail, "copied as Constant_0_1d") {
		t.Fatalf("changes %v, err %v", changes, err)
	}
	nodes := m.GetGraph().GetNode()
	if len(nodes) != 4 || nodes[1].GetOutput()[0] != "Constant_0_1d" || nodes[0].GetAttribute()[0].GetName() != "value_int" ||
		nodes[1].GetAttribute()[0].GetName() != "value_ints" || nodes[1].GetName() != "n0_Constant_1d" {
		t.Fatalf("graph after sanitize: %v", nodes)
	}
	got, err := runORT(t, marshal(t, m), feeds)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"y", "s"} {
		if !slicesEqual(got[name].I64, want[name].I64) {
			t.Errorf("%s = %v, want %v", name, got[name].I64, want[name].I64)
		}
	}
}

func slicesEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
