package qnn

import (
	"fmt"
	"math"
	"strings"

	"sparkconv/onnxpb"
)

// Tolerances for the GELU constants, as ORT's QNN EP GeluFusion checks them
// (onnxruntime core/providers/qnn/builder/qnn_node_group/gelu_fusion.cc:
// sqrt(2) and 0.5 within 1e-3, the 1 of Add within 1e-2).
const (
	tolSqrt2 = 1e-3
	tolOne   = 1e-2
	tolHalf  = 1e-3
)

// matchGELU checks the Erf node e against the exact-GELU pattern.
//
// Accepted without a finding (what ORT's QNN EP GeluFusion fuses, a subset
// of the converter's match_gelu sequences, docs/qnn.md#exact-gelu):
//
//	d = Div(x, c)            c a one-element constant ~ sqrt(2); x must be Div's first input
//	e = Erf(d)
//	a = Add(e, 1) | Add(1, e)
//	then either  Mul(Mul(x, a) | Mul(a, x), 0.5) | Mul(0.5, ...)      (EP pattern 2)
//	or           Mul(a, h) | Mul(h, a) with h = Mul(x, 0.5) | Mul(0.5, x)  (EP pattern 1)
//
// Every intermediate (d, e, a, the inner Mul) must have exactly one reader
// and not be a graph output. variant is "div" for that form, "mul" for the
// same chain starting Mul(x, 1/sqrt(2)) (converter yes, QNN EP no), ""
// with a reason otherwise.
func (x *graphIndex) matchGELU(e *onnxpb.NodeProto) (variant, reason string) {
	d := x.prod(input(e, 0))
	var root string
	switch {
	case isOp(d, "Div") && len(d.GetInput()) == 2 && x.scalarNear(input(d, 1), math.Sqrt2, tolSqrt2):
		root, variant = input(d, 0), "div"
	case isOp(d, "Mul") && len(d.GetInput()) == 2:
		for k := 0; k < 2; k++ {
			if x.scalarNear(input(d, 1-k), 1/math.Sqrt2, tolSqrt2) {
				root, variant = input(d, k), "mul"
			}
		}
	}
	if variant == "" {
		return "", "Erf's input is not Div(x, sqrt(2))"
	}
	if x.soleReader(output(d, 0)) != e {
		return "", "Div(x, sqrt(2)) has readers besides Erf"
	}
	a := x.soleReader(output(e, 0))
	if !isOp(a, "Add") {
		return "", "Erf's output does not go (only) to Add(., 1)"
	}
	if c, ok := otherInput(a, output(e, 0)); !ok || !x.scalarNear(c, 1, tolOne) {
		return "", "the Add after Erf does not add the constant 1"
	}
	m := x.soleReader(output(a, 0))
	if !isOp(m, "Mul") {
		return "", "1 + erf(.) does not go (only) to a Mul"
	}
	other, _ := otherInput(m, output(a, 0))
	if other == root {
		// pattern 2: (x * (1 + erf)) * 0.5
		m2 := x.soleReader(output(m, 0))
		if !isOp(m2, "Mul") {
			return "", "x * (1 + erf) is not followed by Mul(., 0.5)"
		}
		if c, ok := otherInput(m2, output(m, 0)); !ok || !x.scalarNear(c, 0.5, tolHalf) {
			return "", "the last Mul does not multiply by 0.5"
		}
		return variant, ""
	}
	// pattern 1: (0.5 * x) * (1 + erf)
	if h := x.prod(other); isOp(h, "Mul") {
		if c, ok := otherInput(h, root); ok && x.scalarNear(c, 0.5, tolHalf) {
			return variant, ""
		}
	}
	return "", "1 + erf(x/sqrt2) is not multiplied by x and 0.5"
}

func (l *linter) checkErf(i int) {
	variant, reason := l.x.matchGELU(l.x.nodes[i])
	switch variant {
	case "div":
	case "mul":
		l.node("erf-gelu-variant", Warning, i,
			"exact GELU starts with Mul(x, 1/sqrt(2)); the QAIRT converter fuses this form but ORT's QNN EP only fuses Div(x, sqrt(2))",
			"write Div(x, sqrt(2)) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5)")
	default:
		l.node("erf-outside-gelu", Error, i, "Erf is not part of a fusable exact GELU ("+reason+"); a lone Erf is not supported on HTP",
			"write exact GELU as Div(x, sqrt(2)) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5), or use the tanh approximation")
	}
}

// rmsDeviation is one way an RMSNorm differs from the contract pattern;
// fatal ones stop the converter's match_rms_norm.
type rmsDeviation struct {
	msg   string
	fatal bool
}

// checkRMSNorm looks at ReduceMean r: when it averages a square of x
// (Pow(x, 2) or Mul(x, x)) it is an RMSNorm, and the chain after it must be
// Add(eps) -> Sqrt -> Div(x, .) -> Mul(weight), reducing the last axis.
func (l *linter) checkRMSNorm(i int) {
	x := l.x
	r := x.nodes[i]
	sq := x.prod(input(r, 0))
	var base string
	var devs []rmsDeviation
	switch {
	case isOp(sq, "Pow") && len(sq.GetInput()) == 2 && x.scalarNear(input(sq, 1), 2, 0):
		base = input(sq, 0)
	case isOp(sq, "Mul") && len(sq.GetInput()) == 2 && input(sq, 0) == input(sq, 1) && input(sq, 0) != "":
		base = input(sq, 0)
		devs = append(devs, rmsDeviation{"squares with Mul(x, x) instead of Pow(x, 2) (the converter accepts both)", false})
	default:
		return // not an RMSNorm
	}
	devs = append(devs, x.rmsAxes(r, base)...)
	devs = append(devs, x.rmsTail(r, base)...)
	if len(devs) == 0 {
		return
	}
	sev := Warning
	var msgs []string
	for _, d := range devs {
		msgs = append(msgs, d.msg)
		if d.fatal {
			sev = Error
		}
	}
	l.node("rmsnorm-pattern", sev, i, "RMSNorm of "+base+" "+strings.Join(msgs, "; "),
		"write Pow(x, 2) -> ReduceMean(axes=[-1], keepdims=1) -> Add(eps) -> Sqrt -> Div(x, .) -> Mul(weight)")
}

func (x *graphIndex) rmsAxes(r *onnxpb.NodeProto, base string) []rmsDeviation {
	var devs []rmsDeviation
	axes, known, given := x.axesOf(r)
	rank := x.rank(base)
	switch {
	case !known:
		devs = append(devs, rmsDeviation{"reduces axes that are not constant", true})
	case !given:
		if rank != 1 {
			devs = append(devs, rmsDeviation{"reduces all axes instead of the last", true})
		}
	case len(axes) != 1:
		devs = append(devs, rmsDeviation{fmt.Sprintf("reduces axes %v instead of the last one", axes), true})
	case axes[0] != -1 && (rank < 0 || axes[0] != int64(rank-1)):
		if rank < 0 {
			devs = append(devs, rmsDeviation{fmt.Sprintf("reduces axis %d of a tensor of unknown rank; use -1", axes[0]), false})
		} else {
			devs = append(devs, rmsDeviation{fmt.Sprintf("reduces axis %d, not the last axis of rank %d", axes[0], rank), true})
		}
	}
	if attrInt(r, "keepdims", 1) == 0 {
		devs = append(devs, rmsDeviation{"uses keepdims=0", true})
	}
	return devs
}

// rmsTail follows ReduceMean's output through Add(eps), Sqrt, the division
// and the weight.
func (x *graphIndex) rmsTail(r *onnxpb.NodeProto, base string) []rmsDeviation {
	var devs []rmsDeviation
	cur := output(r, 0)
	next := x.soleReader(cur)
	if isOp(next, "Add") {
		if eps, _ := otherInput(next, cur); !x.isConst(eps) {
			devs = append(devs, rmsDeviation{"adds a non-constant epsilon", true})
		}
		cur, next = output(next, 0), x.soleReader(output(next, 0))
	} else {
		devs = append(devs, rmsDeviation{"has no Add(eps) after ReduceMean", true})
	}
	var norm string
	switch {
	case isOp(next, "Sqrt"):
		s := output(next, 0)
		d := x.soleReader(s)
		switch {
		case isOp(d, "Div") && input(d, 1) == s && input(d, 0) == base:
			norm = output(d, 0)
		case isOp(d, "Div") && input(d, 1) == s && x.scalarNear(input(d, 0), 1, 0):
			norm = x.mulByBase(output(d, 0), base)
			devs = append(devs, rmsDeviation{"computes Div(1, Sqrt) then Mul(x, .) instead of Div(x, Sqrt) (a converter variant)", norm == ""})
		case isOp(d, "Reciprocal"):
			norm = x.mulByBase(output(d, 0), base)
			devs = append(devs, rmsDeviation{"computes Reciprocal(Sqrt) then Mul(x, .) instead of Div(x, Sqrt) (converted to Div(1, .))", norm == ""})
		default:
			devs = append(devs, rmsDeviation{"does not divide x by the Sqrt", true})
		}
	case isOp(next, "Pow") && x.scalarNear(input(next, 1), -0.5, 1e-6):
		norm = x.mulByBase(output(next, 0), base)
		devs = append(devs, rmsDeviation{"computes rsqrt as Pow(., -0.5), which the converter does not match", true})
	case next != nil && strings.EqualFold(next.GetOpType(), "Rsqrt"):
		devs = append(devs, rmsDeviation{"uses an Rsqrt op, which ONNX and the converter do not have", true})
	default:
		devs = append(devs, rmsDeviation{"has no Sqrt after the mean", true})
	}
	if norm == "" {
		return devs
	}
	if w := x.soleReader(norm); !isOp(w, "Mul") {
		devs = append(devs, rmsDeviation{"has no Mul(weight) after the division (the contract always applies the weight)", false})
	} else if other, _ := otherInput(w, norm); !x.isConst(other) {
		devs = append(devs, rmsDeviation{"multiplies by a weight that is not a constant", false})
	}
	return devs
}

// mulByBase returns the output of the sole Mul(v, base) reading v, or "".
func (x *graphIndex) mulByBase(v, base string) string {
	m := x.soleReader(v)
	if other, ok := otherInput(m, v); isOp(m, "Mul") && ok && other == base {
		return output(m, 0)
	}
	return ""
}

func (x *graphIndex) isConst(name string) bool {
	_, ok := x.consts[name]
	return ok
}

func (l *linter) checkSoftmax(i int) {
	n := l.x.nodes[i]
	def := int64(-1)
	if l.x.opset > 0 && l.x.opset < 13 {
		def = 1
	}
	axis := attrInt(n, "axis", def)
	rank := l.x.rank(input(n, 0))
	if rank < 0 {
		if axis != -1 {
			l.node("softmax-axis", Warning, i, fmt.Sprintf("%s axis=%d on an input of unknown rank; HTP only takes the last axis", n.GetOpType(), axis),
				"use axis=-1 (opset >= 13) or declare the input shape")
		}
		return
	}
	norm := axis
	if norm < 0 {
		norm += int64(rank)
	}
	if norm != int64(rank-1) && rank > 0 {
		msg := fmt.Sprintf("%s axis=%d of a rank-%d input is not the last axis", n.GetOpType(), axis, rank)
		if def == 1 && attr(n, "axis") == nil {
			msg += " (opset < 13 default axis=1 flattens the trailing dims)"
		}
		l.node("softmax-axis", Error, i, msg, "transpose so the softmax axis is last and use axis=-1 (Softmax-13)")
	}
}

// isNaNGuard reports whether Where node w is Where(IsNaN(v), 0, v) and
// returns v: the guard torchlib puts after SDPA's softmax. The zero must be
// a one-element constant whose rank cannot widen the result.
func (x *graphIndex) isNaNGuard(w *onnxpb.NodeProto) (string, bool) {
	if !isOp(w, "Where") || len(w.GetInput()) != 3 || len(w.GetOutput()) != 1 {
		return "", false
	}
	c, z, v := w.GetInput()[0], w.GetInput()[1], w.GetInput()[2]
	p := x.prod(c)
	if !isOp(p, "IsNaN") || input(p, 0) != v || v == "" {
		return "", false
	}
	zt := x.consts[z]
	vals, ok := tensorFloats(zt)
	if !ok || len(vals) != 1 || vals[0] != 0 {
		return "", false
	}
	zr, vr := len(zt.GetDims()), x.rank(v)
	if zr > 0 && !(vr >= zr || (vr < 0 && zr <= 1)) {
		return "", false
	}
	return v, true
}

func (l *linter) checkWhere(i int) {
	w := l.x.nodes[i]
	if _, ok := l.x.isNaNGuard(w); ok {
		l.node("isnan-guard", Error, i, "Where(IsNaN(x), 0, x) guard (IsNaN has no converter translation)",
			"run `sparkconv sanitize` to remove it (harmless with a finite additive mask), or export SDPA with a float mask")
		return
	}
	if p := l.x.prod(input(w, 0)); p != nil {
		switch p.GetOpType() {
		case "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor", "IsInf":
			l.node("bool-mask", Error, i, fmt.Sprintf("Where selects on a boolean mask computed by %s", p.GetOpType()),
				"fold the condition into an additive float mask (0 keep, mask_value drop) and Add it")
		}
	}
}

func (l *linter) checkIsNaN(i int) {
	n := l.x.nodes[i]
	readers := l.x.readers(output(n, 0))
	guard := len(readers) > 0 && !l.x.graphOut[output(n, 0)]
	for _, r := range readers {
		if _, ok := l.x.isNaNGuard(r); !ok {
			guard = false
		}
	}
	if guard {
		return // reported once per Where by isnan-guard
	}
	l.node("isnan", Error, i, "IsNaN has no QAIRT converter translation and QNN EP takes it on float inputs only",
		"remove the NaN check: keep masks finite and additive so no NaN can arise")
}

func (l *linter) checkReshape(i int) {
	n := l.x.nodes[i]
	shape, ok := l.x.ints(input(n, 1))
	if !ok && len(n.GetInput()) > 1 {
		l.checkShapeInput(i)
	}
	if attrInt(n, "allowzero", 0) == 0 {
		return
	}
	fix := "run `sparkconv sanitize`: the target shape has no 0, so allowzero=0 means the same"
	if !ok {
		fix = "make the target shape a constant without 0 and set allowzero=0"
	} else {
		for _, d := range shape {
			if d == 0 {
				fix = "the target shape holds 0 (an empty dim); remove the empty tensor from the graph and use allowzero=0"
			}
		}
	}
	l.node("reshape-allowzero", Error, i, "Reshape has allowzero=1; the converter accepts only 0", fix)
}

func (l *linter) checkShapeInput(i int) {
	n := l.x.nodes[i]
	if name := input(n, 1); name != "" && !l.x.isConst(name) {
		l.node("shape-not-constant", Error, i, fmt.Sprintf("%s shape %s is computed at run time", n.GetOpType(), name),
			"fold the shape into a constant (static shapes throughout)")
	}
}

// axesSlot returns the input index that holds axes for n at this opset, or
// -1 when axes are an attribute (or n has none).
func (x *graphIndex) axesSlot(n *onnxpb.NodeProto) int {
	op := n.GetOpType()
	since, slot := int64(0), -1
	switch {
	case op == "Squeeze" || op == "Unsqueeze" || op == "ReduceSum":
		since, slot = 13, 1
	case isReduce(op):
		since, slot = 18, 1
	case op == "Slice":
		since, slot = 10, 3
	case op == "Pad":
		since, slot = 18, 3
	default:
		return -1
	}
	if x.opset > 0 && x.opset < since {
		return -1
	}
	if x.opset <= 0 && (attr(n, "axes") != nil || len(n.GetInput()) <= slot) {
		return -1
	}
	return slot
}

func (l *linter) checkAxes(i int) {
	n := l.x.nodes[i]
	slot := l.x.axesSlot(n)
	name := input(n, slot)
	if slot < 0 || name == "" {
		return
	}
	t, ok := l.x.consts[name]
	if !ok {
		l.node("axes-not-constant", Error, i, fmt.Sprintf("axes %s is computed at run time", name),
			"make axes a constant 1-D int64 initializer")
		return
	}
	if r := len(t.GetDims()); r != 1 {
		fix := "make axes a 1-D tensor"
		if r == 0 {
			fix = "run `sparkconv sanitize` (it rewrites rank-0 axes as 1-D)"
		}
		l.node("scalar-axes", Error, i, fmt.Sprintf("axes %s is a rank-%d tensor; ONNX defines axes as 1-D", name, r), fix)
	}
}

// checkExplicitSoftmax finds Exp -> ReduceSum -> Div (or Mul by
// Reciprocal) written out instead of Softmax.
func (l *linter) checkExplicitSoftmax(i int) {
	x := l.x
	e := x.nodes[i]
	ex := output(e, 0)
	for _, r := range x.readers(ex) {
		if !isOp(r, "ReduceSum") || input(r, 0) != ex {
			continue
		}
		sum := output(r, 0)
		for _, d := range x.readers(ex) {
			divides := isOp(d, "Div") && input(d, 0) == ex && input(d, 1) == sum
			if isOp(d, "Mul") {
				if other, ok := otherInput(d, ex); ok {
					rec := x.prod(other)
					divides = isOp(rec, "Reciprocal") && input(rec, 0) == sum
				}
			}
			if !divides {
				continue
			}
			how := "Exp -> ReduceSum -> Div"
			if s := x.prod(input(e, 0)); isOp(s, "Sub") {
				if m := x.prod(input(s, 1)); isOp(m, "ReduceMax") {
					how = "ReduceMax -> Sub -> Exp -> ReduceSum -> Div"
				}
			}
			l.node("explicit-softmax", Error, i, "softmax written out as "+how+" (compiles at fp16, breaks the converter under quantisation)",
				"use one Softmax node (opset 13 semantics, last axis)")
			return
		}
	}
}

// checkMulReduceSum finds Mul -> ReduceSum where the Mul broadcasts: a
// matrix product written without MatMul.
func (l *linter) checkMulReduceSum(i int) {
	x := l.x
	m := x.prod(input(x.nodes[i], 0))
	if !isOp(m, "Mul") || len(m.GetInput()) != 2 {
		return
	}
	a, b := input(m, 0), input(m, 1)
	if _, ok := x.scalar(a); ok {
		return
	}
	if _, ok := x.scalar(b); ok {
		return
	}
	sa, oka := x.shapes[a]
	sb, okb := x.shapes[b]
	if oka && okb {
		if equalKnown(sa, sb) {
			return
		}
		l.node("broadcast-mul-reducesum", Error, i,
			fmt.Sprintf("ReduceSum of a broadcasting Mul (%v x %v): a matrix product written as Mul+ReduceSum", sa, sb),
			"compute the product with MatMul (matching batch dims), as attention scores and outputs")
		return
	}
	l.node("broadcast-mul-reducesum", Warning, i, "ReduceSum of a Mul whose operand shapes are unknown; if it broadcasts it is a product written as Mul+ReduceSum",
		"use MatMul for products, or declare value_info shapes")
}

// equalKnown reports whether a and b are the same fully known shape.
func equalKnown(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] || a[i] < 0 {
			return false
		}
	}
	return true
}

func (l *linter) checkMatMul(i int) {
	x := l.x
	n := x.nodes[i]
	sa, oka := x.shapes[input(n, 0)]
	sb, okb := x.shapes[input(n, 1)]
	if !oka || !okb || len(sa) < 2 || len(sb) < 2 {
		return
	}
	ka, kb := sa[len(sa)-1], sb[len(sb)-2]
	if ka >= 0 && kb >= 0 && ka != kb {
		l.node("matmul-batch", Error, i, fmt.Sprintf("MatMul inner dims disagree: %v x %v", sa, sb), "fix the operand shapes")
		return
	}
	switch {
	case len(sa) >= 3 && len(sb) >= 3:
		ba, bb := sa[:len(sa)-2], sb[:len(sb)-2]
		if len(ba) != len(bb) || !sameDims(ba, bb) {
			l.node("matmul-batch", Error, i, fmt.Sprintf("MatMul batch dims differ: %v x %v (broadcast MatMul)", sa, sb),
				"reshape so both operands have the same batch dims (GQA: reshape the query to [1,KV,heads/KV,D], never broadcast K/V)")
		}
	case len(sa) == 2 && len(sb) >= 3:
		l.node("matmul-batch", Warning, i, fmt.Sprintf("MatMul broadcasts a rank-2 left operand over batch dims: %v x %v", sa, sb),
			"give both operands the same batch dims")
	}
}

// sameDims compares batch dims, treating an unknown dim as matching.
func sameDims(a, b []int64) bool {
	for i := range a {
		if a[i] >= 0 && b[i] >= 0 && a[i] != b[i] {
			return false
		}
	}
	return true
}
