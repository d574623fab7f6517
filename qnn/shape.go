package qnn

import (
	"sparkconv/onnxpb"
)

// Shape inference, just enough for the rules: ranks for Softmax and
// ReduceMean axes, operand shapes for MatMul and Mul. Declared shapes
// (graph inputs, outputs, value_info) win over inferred ones; -1 marks an
// unknown dim, a missing entry an unknown rank.

// sameShapeOps output the shape of their first input.
var sameShapeOps = map[string]bool{
	"Abs": true, "Neg": true, "Exp": true, "Log": true, "Sqrt": true, "Erf": true, "Relu": true,
	"Sigmoid": true, "Tanh": true, "Reciprocal": true, "Cast": true, "Identity": true, "IsNaN": true,
	"IsInf": true, "Not": true, "Softmax": true, "LogSoftmax": true, "Gelu": true, "Floor": true,
	"Ceil": true, "Round": true, "Sign": true, "Sin": true, "Cos": true, "Clip": true, "LeakyRelu": true,
	"Elu": true, "Selu": true, "HardSigmoid": true, "HardSwish": true, "Softplus": true,
	"LayerNormalization": true, "RMSNormalization": true, "SimplifiedLayerNormalization": true,
	"Dropout": true, "CumSum": true, "QuantizeLinear": true, "DequantizeLinear": true,
	"InstanceNormalization": true, "BatchNormalization": true,
}

// broadcastOps output the broadcast of all their inputs.
var broadcastOps = map[string]bool{
	"Add": true, "Sub": true, "Mul": true, "Div": true, "Pow": true, "Equal": true, "Less": true,
	"Greater": true, "LessOrEqual": true, "GreaterOrEqual": true, "And": true, "Or": true, "Xor": true,
	"Max": true, "Min": true, "Mean": true, "Sum": true, "Mod": true, "PRelu": true, "Where": true,
}

func declaredShape(vi *onnxpb.ValueInfoProto) ([]int64, bool) {
	tt := vi.GetType().GetTensorType()
	if tt == nil || tt.GetShape() == nil {
		return nil, false
	}
	dims := make([]int64, len(tt.GetShape().GetDim()))
	for i, d := range tt.GetShape().GetDim() {
		dims[i] = -1
		if v, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue); ok && v.DimValue >= 0 {
			dims[i] = v.DimValue
		}
	}
	return dims, true
}

func tensorShape(t *onnxpb.TensorProto) []int64 {
	dims := make([]int64, len(t.GetDims()))
	for i, d := range t.GetDims() {
		dims[i] = d
		if d < 0 {
			dims[i] = -1
		}
	}
	return dims
}

func (x *graphIndex) inferShapes() {
	declared := map[string]bool{}
	for _, vis := range [][]*onnxpb.ValueInfoProto{x.g.GetInput(), x.g.GetOutput(), x.g.GetValueInfo()} {
		for _, vi := range vis {
			if s, ok := declaredShape(vi); ok {
				x.shapes[vi.GetName()] = s
				declared[vi.GetName()] = true
			}
		}
	}
	for name, t := range x.consts {
		x.shapes[name] = tensorShape(t)
		declared[name] = true
	}
	for _, n := range x.nodes {
		outs := x.inferNode(n)
		for i, s := range outs {
			name := output(n, i)
			if name != "" && s != nil && !declared[name] {
				x.shapes[name] = s
			}
		}
	}
}

// in returns the known shape of input i of n, or nil.
func (x *graphIndex) in(n *onnxpb.NodeProto, i int) []int64 {
	name := input(n, i)
	if name == "" {
		return nil
	}
	return x.shapes[name]
}

// inferNode returns the shapes of n's outputs (nil entries when unknown).
func (x *graphIndex) inferNode(n *onnxpb.NodeProto) [][]int64 {
	if n.GetDomain() != "" && n.GetDomain() != "ai.onnx" {
		return nil
	}
	op := n.GetOpType()
	a := x.in(n, 0)
	switch {
	case sameShapeOps[op]:
		return one(a)
	case broadcastOps[op]:
		var out []int64
		for i := range n.GetInput() {
			s := x.in(n, i)
			if s == nil {
				return nil
			}
			if i == 0 {
				out = s
			} else {
				out = broadcast(out, s)
			}
		}
		return one(out)
	}
	switch op {
	case "MatMul":
		return one(matmulShape(a, x.in(n, 1)))
	case "Transpose":
		return one(transposeShape(a, attr(n, "perm")))
	case "Reshape":
		return one(x.reshapeShape(n, a))
	case "Unsqueeze", "Squeeze":
		return one(x.squeezeShape(n, a))
	case "Concat":
		return one(x.concatShape(n))
	case "Gather":
		return one(gatherShape(a, x.in(n, 1), attrInt(n, "axis", 0)))
	case "Expand":
		if v, ok := x.ints(input(n, 1)); ok && a != nil {
			return one(broadcast(a, clampDims(v)))
		}
	case "Flatten":
		return one(flattenShape(a, attrInt(n, "axis", 1)))
	case "Shape":
		if a != nil {
			return one([]int64{int64(len(a))})
		}
	case "Slice":
		return one(x.sliceShape(n, a))
	case "Split":
		return x.splitShape(n, a)
	}
	if isReduce(op) {
		return one(x.reduceShape(n, a))
	}
	return nil
}

func one(s []int64) [][]int64 {
	if s == nil {
		return nil
	}
	return [][]int64{s}
}

func clampDims(v []int64) []int64 {
	out := make([]int64, len(v))
	for i, d := range v {
		out[i] = d
		if d < 0 {
			out[i] = -1
		}
	}
	return out
}

// broadcast is numpy broadcasting with -1 for unknown dims.
func broadcast(a, b []int64) []int64 {
	if len(a) < len(b) {
		a, b = b, a
	}
	out := append([]int64(nil), a...)
	off := len(a) - len(b)
	for i, d := range b {
		o := out[off+i]
		switch {
		case o == d || d == 1:
		case o == 1:
			out[off+i] = d
		case o == -1 || d == -1:
			out[off+i] = max(o, d)
			if out[off+i] == 1 {
				out[off+i] = -1
			}
		default:
			out[off+i] = -1 // incompatible; the graph is invalid here
		}
	}
	return out
}

func matmulShape(a, b []int64) []int64 {
	if len(a) < 2 || len(b) < 2 {
		return nil
	}
	batch := broadcast(a[:len(a)-2], b[:len(b)-2])
	return append(batch, a[len(a)-2], b[len(b)-1])
}

func transposeShape(a []int64, perm *onnxpb.AttributeProto) []int64 {
	if a == nil {
		return nil
	}
	out := make([]int64, len(a))
	if perm == nil {
		for i := range a {
			out[i] = a[len(a)-1-i]
		}
		return out
	}
	p := perm.GetInts()
	if len(p) != len(a) {
		return nil
	}
	for i, ax := range p {
		if ax < 0 || ax >= int64(len(a)) {
			return nil
		}
		out[i] = a[ax]
	}
	return out
}

func (x *graphIndex) reshapeShape(n *onnxpb.NodeProto, a []int64) []int64 {
	target, ok := x.ints(input(n, 1))
	if !ok {
		return nil
	}
	allowZero := attrInt(n, "allowzero", 0) != 0
	out := make([]int64, len(target))
	infer := -1
	known := int64(1)
	for i, d := range target {
		switch {
		case d == 0 && !allowZero:
			if a == nil || i >= len(a) {
				return nil
			}
			out[i] = a[i]
		case d == -1 && infer < 0:
			infer = i
			continue
		case d < 0:
			return nil
		default:
			out[i] = d
		}
		if out[i] < 0 || (out[i] > 0 && known > 1<<40/out[i]) {
			known = -1
		} else if known >= 0 {
			known *= out[i]
		}
	}
	if infer >= 0 {
		out[infer] = -1
		total := numel(a, 1<<40)
		if a != nil && total >= 0 && known > 0 && total%known == 0 {
			for _, d := range a {
				if d < 0 {
					total = -1
				}
			}
			if total >= 0 {
				out[infer] = total / known
			}
		}
	}
	return out
}

// axesOf returns the axes of n given as attribute or (opset-dependent)
// second input, whether they are known, and whether they were given.
func (x *graphIndex) axesOf(n *onnxpb.NodeProto) (axes []int64, known, given bool) {
	if slot := x.axesSlot(n); slot >= 0 {
		name := input(n, slot)
		if name == "" {
			return nil, true, false
		}
		v, ok := x.ints(name)
		return v, ok, true
	}
	if a := attr(n, "axes"); a != nil {
		return a.GetInts(), true, true
	}
	return nil, true, false
}

func (x *graphIndex) squeezeShape(n *onnxpb.NodeProto, a []int64) []int64 {
	if a == nil {
		return nil
	}
	axes, known, given := x.axesOf(n)
	if !known {
		return nil
	}
	if n.GetOpType() == "Unsqueeze" {
		r := int64(len(a) + len(axes))
		set := map[int64]bool{}
		for _, ax := range axes {
			if ax < 0 {
				ax += r
			}
			if ax < 0 || ax >= r {
				return nil
			}
			set[ax] = true
		}
		out := make([]int64, 0, r)
		j := 0
		for i := int64(0); i < r; i++ {
			if set[i] {
				out = append(out, 1)
			} else if j < len(a) {
				out = append(out, a[j])
				j++
			}
		}
		return out
	}
	drop := map[int64]bool{}
	for _, ax := range axes {
		if ax < 0 {
			ax += int64(len(a))
		}
		drop[ax] = true
	}
	out := []int64{}
	for i, d := range a {
		if given && drop[int64(i)] {
			continue
		}
		if !given && d == 1 {
			continue
		}
		if !given && d < 0 {
			return nil
		}
		out = append(out, d)
	}
	return out
}

func (x *graphIndex) concatShape(n *onnxpb.NodeProto) []int64 {
	var out []int64
	for i := range n.GetInput() {
		s := x.in(n, i)
		if s == nil || (out != nil && len(s) != len(out)) {
			return nil
		}
		if out == nil {
			out = append([]int64(nil), s...)
			continue
		}
		ax := attrInt(n, "axis", 0)
		if ax < 0 {
			ax += int64(len(out))
		}
		if ax < 0 || ax >= int64(len(out)) {
			return nil
		}
		if out[ax] < 0 || s[ax] < 0 {
			out[ax] = -1
		} else {
			out[ax] += s[ax]
		}
	}
	return out
}

func gatherShape(data, idx []int64, axis int64) []int64 {
	if data == nil || idx == nil {
		return nil
	}
	if axis < 0 {
		axis += int64(len(data))
	}
	if axis < 0 || axis >= int64(len(data)) {
		return nil
	}
	out := append([]int64(nil), data[:axis]...)
	out = append(out, idx...)
	return append(out, data[axis+1:]...)
}

func flattenShape(a []int64, axis int64) []int64 {
	if a == nil {
		return nil
	}
	if axis < 0 {
		axis += int64(len(a))
	}
	if axis < 0 || axis > int64(len(a)) {
		return nil
	}
	return []int64{prodDims(a[:axis]), prodDims(a[axis:])}
}

func prodDims(d []int64) int64 {
	if n := numel(d, 1<<40); n >= 0 {
		return n
	}
	return -1
}

func (x *graphIndex) sliceShape(n *onnxpb.NodeProto, a []int64) []int64 {
	if a == nil || len(n.GetInput()) < 3 {
		return nil
	}
	starts, ok1 := x.ints(input(n, 1))
	ends, ok2 := x.ints(input(n, 2))
	if !ok1 || !ok2 || len(starts) != len(ends) {
		return nil
	}
	axes := make([]int64, len(starts))
	for i := range axes {
		axes[i] = int64(i)
	}
	if name := input(n, 3); name != "" {
		v, ok := x.ints(name)
		if !ok || len(v) != len(starts) {
			return nil
		}
		axes = v
	}
	steps := make([]int64, len(starts))
	for i := range steps {
		steps[i] = 1
	}
	if name := input(n, 4); name != "" {
		v, ok := x.ints(name)
		if !ok || len(v) != len(starts) {
			return nil
		}
		steps = v
	}
	out := append([]int64(nil), a...)
	for i, ax := range axes {
		if ax < 0 {
			ax += int64(len(a))
		}
		if ax < 0 || ax >= int64(len(a)) {
			return nil
		}
		out[ax] = sliceLen(a[ax], starts[i], ends[i], steps[i])
	}
	return out
}

// sliceLen is the length of dim d sliced [s:e:step] (-1 when unknown).
func sliceLen(d, s, e, step int64) int64 {
	if d < 0 || step == 0 {
		return -1
	}
	clamp := func(v, lo, hi int64) int64 { return min(max(v, lo), hi) }
	if s < 0 {
		s += d
	}
	if e < 0 {
		e += d
	}
	if step > 0 {
		s, e = clamp(s, 0, d), clamp(e, 0, d)
		if e <= s {
			return 0
		}
		return (e - s + step - 1) / step
	}
	s, e = clamp(s, -1, d-1), clamp(e, -1, d-1)
	if s <= e {
		return 0
	}
	return (s - e - step - 1) / -step
}

func (x *graphIndex) splitShape(n *onnxpb.NodeProto, a []int64) [][]int64 {
	if a == nil {
		return nil
	}
	ax := attrInt(n, "axis", 0)
	if ax < 0 {
		ax += int64(len(a))
	}
	if ax < 0 || ax >= int64(len(a)) {
		return nil
	}
	var sizes []int64
	if name := input(n, 1); name != "" {
		v, ok := x.ints(name)
		if !ok {
			return nil
		}
		sizes = v
	} else if s := attr(n, "split"); s != nil {
		sizes = s.GetInts()
	} else if k := int64(len(n.GetOutput())); k > 0 && a[ax] >= 0 && a[ax]%k == 0 {
		for range n.GetOutput() {
			sizes = append(sizes, a[ax]/k)
		}
	}
	if len(sizes) != len(n.GetOutput()) {
		return nil
	}
	out := make([][]int64, len(sizes))
	for i, sz := range sizes {
		s := append([]int64(nil), a...)
		s[ax] = sz
		out[i] = s
	}
	return out
}

func isReduce(op string) bool {
	switch op {
	case "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
		"ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare":
		return true
	}
	return false
}

func (x *graphIndex) reduceShape(n *onnxpb.NodeProto, a []int64) []int64 {
	if a == nil {
		return nil
	}
	axes, known, given := x.axesOf(n)
	if !known {
		return nil
	}
	if !given && attrInt(n, "noop_with_empty_axes", 0) != 0 {
		return append([]int64(nil), a...)
	}
	keep := attrInt(n, "keepdims", 1) != 0
	red := map[int64]bool{}
	for _, ax := range axes {
		if ax < 0 {
			ax += int64(len(a))
		}
		red[ax] = true
	}
	out := []int64{}
	for i, d := range a {
		if !given || red[int64(i)] {
			if keep {
				out = append(out, 1)
			}
			continue
		}
		out = append(out, d)
	}
	return out
}
