// Package onnxeval is a small pure-Go ONNX interpreter for the float32
// graphs sparkconv exports (the ops of the decode-step contract: MatMul,
// Gather, elementwise arithmetic with broadcasting, Pow, Sqrt, Erf, Tanh,
// Sigmoid, ReduceMean, Softmax, Reshape, Split, Concat, Slice, Transpose). It runs a
// graph node by node and hands every value to a visitor, which is what
// calibration needs: the range of every tensor a quantizer will see,
// without cgo. ONNX Runtime (ortrun) stays the judge of the exported
// graphs; tests check this interpreter against it and against the
// reference forward.
package onnxeval

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"sparkconv/kernels"
	"sparkconv/onnxpb"
)

// Value is a tensor: float32 data in F, or int64 data in I (shape inputs,
// token ids).
type Value struct {
	Shape []int
	F     []float32
	I     []int64
	// T is F transposed, for a 2-D weight that only MatMul reads (Load
	// makes it once, so a decode step's product is one MatVecNT).
	T []float32
}

// Numel is the element count of shape.
func Numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Graph is a loaded model ready to run.
type Graph struct {
	nodes   []*onnxpb.NodeProto
	inits   map[string]Value
	inputs  []string
	outputs []string
}

// Load decodes the graph's initializers (raw_data, float_data or
// int64_data; float32 and int64 only) and checks every op is one it runs.
func Load(m *onnxpb.ModelProto) (*Graph, error) {
	g := m.GetGraph()
	if g == nil {
		return nil, fmt.Errorf("model has no graph")
	}
	out := &Graph{nodes: g.Node, inits: map[string]Value{}}
	for _, t := range g.Initializer {
		v, err := tensorValue(t)
		if err != nil {
			return nil, fmt.Errorf("initializer %s: %w", t.GetName(), err)
		}
		out.inits[t.GetName()] = v
	}
	for _, vi := range g.Input {
		out.inputs = append(out.inputs, vi.GetName())
	}
	for _, vi := range g.Output {
		out.outputs = append(out.outputs, vi.GetName())
	}
	out.transposeWeights()
	for i, n := range g.Node {
		if n.GetDomain() != "" && n.GetDomain() != "ai.onnx" {
			return nil, fmt.Errorf("node %d (%s): domain %q is not run by onnxeval", i, n.GetName(), n.GetDomain())
		}
		if _, ok := ops[n.GetOpType()]; !ok {
			return nil, fmt.Errorf("node %d (%s): op %s is not run by onnxeval", i, n.GetName(), n.GetOpType())
		}
	}
	return out, nil
}

// transposeWeights gives every 2-D float initializer that is read only as
// MatMul's second input its transpose.
func (g *Graph) transposeWeights() {
	other := map[string]bool{}
	mm := map[string]bool{}
	for _, n := range g.nodes {
		for k, in := range n.Input {
			if n.GetOpType() == "MatMul" && k == 1 {
				mm[in] = true
			} else {
				other[in] = true
			}
		}
	}
	for name := range mm {
		v, ok := g.inits[name]
		if !ok || other[name] || len(v.Shape) != 2 || v.F == nil {
			continue
		}
		k, n := v.Shape[0], v.Shape[1]
		t := make([]float32, len(v.F))
		kernels.Parallel(n, func(lo, hi int) {
			for j := lo; j < hi; j++ {
				for r := range k {
					t[j*k+r] = v.F[r*n+j]
				}
			}
		})
		v.T = t
		g.inits[name] = v
	}
}

// Initializer returns a constant of the graph.
func (g *Graph) Initializer(name string) (Value, bool) {
	v, ok := g.inits[name]
	return v, ok
}

func tensorValue(t *onnxpb.TensorProto) (Value, error) {
	shape := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		shape[i] = int(d)
	}
	n := Numel(shape)
	if t.GetDataLocation() == onnxpb.TensorProto_EXTERNAL {
		return Value{}, fmt.Errorf("external data is not loaded by onnxeval")
	}
	switch onnxpb.TensorProto_DataType(t.GetDataType()) {
	case onnxpb.TensorProto_FLOAT:
		if len(t.FloatData) == n {
			return Value{Shape: shape, F: t.FloatData}, nil
		}
		if len(t.RawData) != 4*n {
			return Value{}, fmt.Errorf("%d raw bytes for %d floats", len(t.RawData), n)
		}
		f := make([]float32, n)
		for i := range f {
			f[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.RawData[4*i:]))
		}
		return Value{Shape: shape, F: f}, nil
	case onnxpb.TensorProto_INT64:
		if len(t.Int64Data) == n {
			return Value{Shape: shape, I: t.Int64Data}, nil
		}
		if len(t.RawData) != 8*n {
			return Value{}, fmt.Errorf("%d raw bytes for %d int64s", len(t.RawData), n)
		}
		v := make([]int64, n)
		for i := range v {
			v[i] = int64(binary.LittleEndian.Uint64(t.RawData[8*i:]))
		}
		return Value{Shape: shape, I: v}, nil
	}
	return Value{}, fmt.Errorf("element type %d is not run by onnxeval (float32 and int64 only)", t.GetDataType())
}

// Run evaluates the graph on inputs. visit, when set, sees every graph
// input and every node output as it is computed (it must not modify the
// value). It returns the graph outputs.
func (g *Graph) Run(inputs map[string]Value, visit func(name string, v Value)) (map[string]Value, error) {
	env := make(map[string]Value, len(g.inits)+len(g.nodes))
	for k, v := range g.inits {
		env[k] = v
	}
	for _, name := range g.inputs {
		v, ok := inputs[name]
		if !ok {
			return nil, fmt.Errorf("input %s not fed", name)
		}
		env[name] = v
		if visit != nil {
			visit(name, v)
		}
	}
	for i, n := range g.nodes {
		ins := make([]Value, len(n.Input))
		for k, name := range n.Input {
			if name == "" {
				continue
			}
			v, ok := env[name]
			if !ok {
				return nil, fmt.Errorf("node %d (%s) reads %s, which is not defined before it", i, n.GetName(), name)
			}
			ins[k] = v
		}
		outs, err := ops[n.GetOpType()](n, ins)
		if err != nil {
			return nil, fmt.Errorf("node %d (%s %s): %w", i, n.GetOpType(), n.GetName(), err)
		}
		if len(outs) < len(n.Output) {
			return nil, fmt.Errorf("node %d (%s): %d outputs, the node names %d", i, n.GetName(), len(outs), len(n.Output))
		}
		for k, name := range n.Output {
			env[name] = outs[k]
			if visit != nil {
				visit(name, outs[k])
			}
		}
	}
	res := map[string]Value{}
	for _, name := range g.outputs {
		v, ok := env[name]
		if !ok {
			return nil, fmt.Errorf("output %s is not produced", name)
		}
		res[name] = v
	}
	return res, nil
}

type opFunc func(n *onnxpb.NodeProto, in []Value) ([]Value, error)

var ops map[string]opFunc

func init() {
	ops = map[string]opFunc{
		"Add": binary2(func(a, b float32) float32 { return a + b }),
		"Sub": binary2(func(a, b float32) float32 { return a - b }),
		"Mul": binary2(func(a, b float32) float32 { return a * b }),
		"Div": binary2(func(a, b float32) float32 { return a / b }),
		"Pow": binary2(func(a, b float32) float32 {
			if b == 2 {
				return a * a
			}
			return float32(math.Pow(float64(a), float64(b)))
		}),
		"Sqrt":       unary(func(x float32) float32 { return float32(math.Sqrt(float64(x))) }),
		"Erf":        unary(func(x float32) float32 { return float32(math.Erf(float64(x))) }),
		"Tanh":       unary(func(x float32) float32 { return float32(math.Tanh(float64(x))) }),
		"Sigmoid":    unary(func(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }),
		"Identity":   func(_ *onnxpb.NodeProto, in []Value) ([]Value, error) { return in[:1], nil },
		"MatMul":     matMul,
		"Gather":     gather,
		"ReduceMean": reduceMean,
		"Softmax":    softmax,
		"Reshape":    reshape,
		"Split":      split,
		"Concat":     concat,
		"Slice":      slice,
		"Transpose":  transpose,
	}
}

func attrInt(n *onnxpb.NodeProto, name string, def int64) int64 {
	for _, a := range n.Attribute {
		if a.GetName() == name {
			return a.GetI()
		}
	}
	return def
}

func attrInts(n *onnxpb.NodeProto, name string) ([]int64, bool) {
	for _, a := range n.Attribute {
		if a.GetName() == name {
			return a.Ints, true
		}
	}
	return nil, false
}

func axisOf(a int64, rank int) (int, error) {
	if a < 0 {
		a += int64(rank)
	}
	if a < 0 || a >= int64(rank) {
		return 0, fmt.Errorf("axis %d out of range for rank %d", a, rank)
	}
	return int(a), nil
}

func unary(f func(float32) float32) opFunc {
	return func(_ *onnxpb.NodeProto, in []Value) ([]Value, error) {
		x := in[0]
		out := make([]float32, len(x.F))
		for i, v := range x.F {
			out[i] = f(v)
		}
		return []Value{{Shape: x.Shape, F: out}}, nil
	}
}

// broadcastShape is numpy's broadcast of two shapes.
func broadcastShape(a, b []int) ([]int, error) {
	r := max(len(a), len(b))
	out := make([]int, r)
	for i := range r {
		da, db := 1, 1
		if j := i - (r - len(a)); j >= 0 {
			da = a[j]
		}
		if j := i - (r - len(b)); j >= 0 {
			db = b[j]
		}
		switch {
		case da == db, db == 1:
			out[i] = da
		case da == 1:
			out[i] = db
		default:
			return nil, fmt.Errorf("shapes %v and %v do not broadcast", a, b)
		}
	}
	return out, nil
}

// strides returns the element strides of shape aligned to rank r, 0 on
// broadcast axes.
func broadcastStrides(shape []int, out []int) []int {
	r := len(out)
	st := make([]int, r)
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		if shape[i] != 1 {
			st[i+r-len(shape)] = s
		}
		s *= shape[i]
	}
	return st
}

func binary2(f func(a, b float32) float32) opFunc {
	return func(_ *onnxpb.NodeProto, in []Value) ([]Value, error) {
		a, b := in[0], in[1]
		if a.F == nil || b.F == nil {
			return nil, fmt.Errorf("float inputs only")
		}
		shape, err := broadcastShape(a.Shape, b.Shape)
		if err != nil {
			return nil, err
		}
		n := Numel(shape)
		out := make([]float32, n)
		switch {
		case len(a.F) == n && len(b.F) == n:
			for i := range out {
				out[i] = f(a.F[i], b.F[i])
			}
		case len(a.F) == n && len(b.F) == 1:
			for i := range out {
				out[i] = f(a.F[i], b.F[0])
			}
		default:
			sa, sb := broadcastStrides(a.Shape, shape), broadcastStrides(b.Shape, shape)
			idx := make([]int, len(shape))
			ia, ib := 0, 0
			for i := range out {
				out[i] = f(a.F[ia], b.F[ib])
				for d := len(shape) - 1; d >= 0; d-- {
					idx[d]++
					ia += sa[d]
					ib += sb[d]
					if idx[d] < shape[d] {
						break
					}
					ia -= sa[d] * shape[d]
					ib -= sb[d] * shape[d]
					idx[d] = 0
				}
			}
		}
		return []Value{{Shape: shape, F: out}}, nil
	}
}

// matMul is numpy matmul on rank >= 2 operands with broadcast batch dims.
func matMul(_ *onnxpb.NodeProto, in []Value) ([]Value, error) {
	a, b := in[0], in[1]
	if len(a.Shape) < 2 || len(b.Shape) < 2 {
		return nil, fmt.Errorf("rank-1 MatMul operands are not run by onnxeval")
	}
	m, k := a.Shape[len(a.Shape)-2], a.Shape[len(a.Shape)-1]
	k2, n := b.Shape[len(b.Shape)-2], b.Shape[len(b.Shape)-1]
	if k != k2 {
		return nil, fmt.Errorf("shapes %v and %v: inner dims %d and %d", a.Shape, b.Shape, k, k2)
	}
	batch, err := broadcastShape(a.Shape[:len(a.Shape)-2], b.Shape[:len(b.Shape)-2])
	if err != nil {
		return nil, err
	}
	nb := Numel(batch)
	out := make([]float32, nb*m*n)
	sa, sb := broadcastStrides(a.Shape[:len(a.Shape)-2], batch), broadcastStrides(b.Shape[:len(b.Shape)-2], batch)
	idx := make([]int, len(batch))
	for t := range nb {
		oa, ob := 0, 0
		for d, i := range idx {
			oa += i * sa[d]
			ob += i * sb[d]
		}
		c := out[t*m*n : (t+1)*m*n]
		av, bv := a.F[oa*m*k:(oa+1)*m*k], b.F[ob*k*n:(ob+1)*k*n]
		switch {
		case m == 1 && b.T != nil && len(b.Shape) == 2:
			kernels.MatVecNT(c, b.T, av, n, k)
		case m == 1 && n >= 64:
			matVecTN(c, av, bv, k, n)
		default:
			kernels.Sgemm(false, false, m, n, k, 1, av, k, bv, n, 0, c, n)
		}
		for d := len(idx) - 1; d >= 0; d-- {
			if idx[d]++; idx[d] < batch[d] {
				break
			}
			idx[d] = 0
		}
	}
	return []Value{{Shape: append(append([]int(nil), batch...), m, n), F: out}}, nil
}

// matVecTN is c[n] = sum_k x[k] * B[k, n] for a row-major B [k, n] (a
// decode step against an exported [in, out] weight), as axpys over B's
// rows, split over the cores by output column ranges.
func matVecTN(c, x, b []float32, k, n int) {
	kernels.Parallel(n, func(lo, hi int) {
		if hi-lo < 1 {
			return
		}
		acc := c[lo:hi]
		clear(acc)
		for r := range k {
			kernels.Axpy(x[r], b[r*n+lo:r*n+hi], acc)
		}
	})
}

func gather(n *onnxpb.NodeProto, in []Value) ([]Value, error) {
	data, idx := in[0], in[1]
	if attrInt(n, "axis", 0) != 0 || data.F == nil || idx.I == nil {
		return nil, fmt.Errorf("only Gather on axis 0 of a float tensor with int64 indices")
	}
	row := Numel(data.Shape[1:])
	out := make([]float32, 0, len(idx.I)*row)
	for _, i := range idx.I {
		if i < 0 {
			i += int64(data.Shape[0])
		}
		if i < 0 || i >= int64(data.Shape[0]) {
			return nil, fmt.Errorf("index %d outside [0, %d)", i, data.Shape[0])
		}
		out = append(out, data.F[int(i)*row:int(i+1)*row]...)
	}
	shape := append(append([]int(nil), idx.Shape...), data.Shape[1:]...)
	return []Value{{Shape: shape, F: out}}, nil
}

// lastAxisRows checks axis is the last one and returns the row length.
func lastAxisRows(x Value, axis int64) (int, error) {
	ax, err := axisOf(axis, len(x.Shape))
	if err != nil {
		return 0, err
	}
	if ax != len(x.Shape)-1 {
		return 0, fmt.Errorf("only the last axis is run by onnxeval (got axis %d of %v)", axis, x.Shape)
	}
	return x.Shape[ax], nil
}

func reduceMean(n *onnxpb.NodeProto, in []Value) ([]Value, error) {
	x := in[0]
	axes, ok := attrInts(n, "axes")
	if !ok || len(axes) != 1 {
		return nil, fmt.Errorf("ReduceMean needs one axis in its axes attribute")
	}
	w, err := lastAxisRows(x, axes[0])
	if err != nil {
		return nil, err
	}
	rows := len(x.F) / w
	out := make([]float32, rows)
	for r := range rows {
		var s float64
		for _, v := range x.F[r*w : (r+1)*w] {
			s += float64(v)
		}
		out[r] = float32(s / float64(w))
	}
	shape := slices.Clone(x.Shape)
	if attrInt(n, "keepdims", 1) == 1 {
		shape[len(shape)-1] = 1
	} else {
		shape = shape[:len(shape)-1]
	}
	return []Value{{Shape: shape, F: out}}, nil
}

func softmax(n *onnxpb.NodeProto, in []Value) ([]Value, error) {
	x := in[0]
	w, err := lastAxisRows(x, attrInt(n, "axis", -1))
	if err != nil {
		return nil, err
	}
	out := slices.Clone(x.F)
	for r := 0; r < len(out); r += w {
		kernels.Softmax(out[r : r+w])
	}
	return []Value{{Shape: x.Shape, F: out}}, nil
}

func reshape(n *onnxpb.NodeProto, in []Value) ([]Value, error) {
	x, s := in[0], in[1]
	if attrInt(n, "allowzero", 0) != 0 {
		return nil, fmt.Errorf("allowzero=1 is not run by onnxeval")
	}
	shape := make([]int, len(s.I))
	infer, known := -1, 1
	for i, d := range s.I {
		switch {
		case d == -1 && infer < 0:
			infer = i
			continue
		case d == 0 && i < len(x.Shape):
			shape[i] = x.Shape[i]
		case d > 0:
			shape[i] = int(d)
		default:
			return nil, fmt.Errorf("shape %v", s.I)
		}
		known *= shape[i]
	}
	total := Numel(x.Shape)
	if infer >= 0 && known > 0 {
		shape[infer] = total / known
	}
	if Numel(shape) != total {
		return nil, fmt.Errorf("cannot reshape %v to %v", x.Shape, s.I)
	}
	return []Value{{Shape: shape, F: x.F, I: x.I}}, nil
}

// outerInner splits shape around axis: rows before, the axis, elements after.
func outerInner(shape []int, axis int) (outer, inner int) {
	return Numel(shape[:axis]), Numel(shape[axis+1:])
}

func split(n *onnxpb.NodeProto, in []Value) ([]Value, error) {
	x := in[0]
	ax, err := axisOf(attrInt(n, "axis", 0), len(x.Shape))
	if err != nil {
		return nil, err
	}
	if len(in) < 2 || in[1].I == nil {
		return nil, fmt.Errorf("Split needs its sizes as an int64 input")
	}
	outer, inner := outerInner(x.Shape, ax)
	var outs []Value
	start := 0
	for _, sz := range in[1].I {
		s := int(sz)
		shape := slices.Clone(x.Shape)
		shape[ax] = s
		out := make([]float32, 0, outer*s*inner)
		for o := range outer {
			base := (o*x.Shape[ax] + start) * inner
			out = append(out, x.F[base:base+s*inner]...)
		}
		outs = append(outs, Value{Shape: shape, F: out})
		start += s
	}
	if start != x.Shape[ax] {
		return nil, fmt.Errorf("split sizes %v do not cover axis %d of %v", in[1].I, ax, x.Shape)
	}
	return outs, nil
}

func concat(n *onnxpb.NodeProto, in []Value) ([]Value, error) {
	ax, err := axisOf(attrInt(n, "axis", 0), len(in[0].Shape))
	if err != nil {
		return nil, err
	}
	shape := slices.Clone(in[0].Shape)
	shape[ax] = 0
	for _, v := range in {
		if len(v.Shape) != len(shape) {
			return nil, fmt.Errorf("ranks differ")
		}
		shape[ax] += v.Shape[ax]
	}
	outer, inner := outerInner(shape, ax)
	out := make([]float32, 0, Numel(shape))
	for o := range outer {
		for _, v := range in {
			w := v.Shape[ax] * inner
			out = append(out, v.F[o*w:(o+1)*w]...)
		}
	}
	return []Value{{Shape: shape, F: out}}, nil
}

func slice(_ *onnxpb.NodeProto, in []Value) ([]Value, error) {
	x := in[0]
	if len(in) < 4 || len(in[1].I) != 1 || len(in[2].I) != 1 || len(in[3].I) != 1 || (len(in) > 4 && in[4].I != nil) {
		return nil, fmt.Errorf("only one-axis Slice with unit steps is run by onnxeval")
	}
	ax, err := axisOf(in[3].I[0], len(x.Shape))
	if err != nil {
		return nil, err
	}
	d := int64(x.Shape[ax])
	clamp := func(v int64) int64 {
		if v < 0 {
			v += d
		}
		return max(0, min(v, d))
	}
	s, e := clamp(in[1].I[0]), clamp(in[2].I[0])
	e = max(e, s)
	shape := slices.Clone(x.Shape)
	shape[ax] = int(e - s)
	outer, inner := outerInner(x.Shape, ax)
	out := make([]float32, 0, Numel(shape))
	for o := range outer {
		base := o * int(d) * inner
		out = append(out, x.F[base+int(s)*inner:base+int(e)*inner]...)
	}
	return []Value{{Shape: shape, F: out}}, nil
}

// transpose permutes the axes of x by perm (default: reversed).
func transpose(n *onnxpb.NodeProto, in []Value) ([]Value, error) {
	x := in[0]
	r := len(x.Shape)
	perm, ok := attrInts(n, "perm")
	if !ok {
		for i := r - 1; i >= 0; i-- {
			perm = append(perm, int64(i))
		}
	}
	if len(perm) != r {
		return nil, fmt.Errorf("perm %v for rank %d", perm, r)
	}
	shape := make([]int, r)
	seen := make([]bool, r)
	for i, p := range perm {
		if p < 0 || int(p) >= r || seen[p] {
			return nil, fmt.Errorf("perm %v is not a permutation of %d axes", perm, r)
		}
		seen[p] = true
		shape[i] = x.Shape[p]
	}
	// stride[i]: the input stride of output axis i.
	in1 := make([]int, r)
	acc := 1
	for i := r - 1; i >= 0; i-- {
		in1[i] = acc
		acc *= x.Shape[i]
	}
	stride := make([]int, r)
	for i, p := range perm {
		stride[i] = in1[p]
	}
	out := make([]float32, len(x.F))
	idx := make([]int, r)
	src := 0
	for o := range out {
		out[o] = x.F[src]
		for i := r - 1; i >= 0; i-- {
			idx[i]++
			src += stride[i]
			if idx[i] < shape[i] {
				break
			}
			src -= stride[i] * shape[i]
			idx[i] = 0
		}
	}
	return []Value{{Shape: shape, F: out}}, nil
}
