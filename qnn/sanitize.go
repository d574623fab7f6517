package qnn

import (
	"errors"
	"fmt"
	"strconv"

	"sparkconv/onnxpb"

	"google.golang.org/protobuf/proto"
)

// Change is one rewrite Sanitize made.
type Change struct {
	// Kind is remove-isnan-guard, set-allowzero, axes-to-1d, remove-node or
	// remove-initializer.
	Kind   string `json:"kind"`
	Node   string `json:"node,omitempty"`
	Op     string `json:"op,omitempty"`
	Tensor string `json:"tensor,omitempty"`
	Detail string `json:"detail"`
}

func (c Change) String() string {
	s := c.Kind
	if c.Node != "" {
		s += " node " + c.Node + " (" + c.Op + ")"
	}
	if c.Tensor != "" {
		s += " tensor " + c.Tensor
	}
	return s + ": " + c.Detail
}

// Sanitize rewrites, in place, the constructs PyTorch's dynamo exporter
// emits that QNN refuses, keeping what the graph computes:
//
//   - Where(IsNaN(x), 0, x) guards are removed: their readers read x (a
//     guard whose output is a graph output becomes Identity(x)), and the
//     IsNaN and constants left without readers are dropped. The guard only
//     changes NaN to 0; with a finite additive mask softmax yields no NaN.
//   - Reshape allowzero=1 becomes allowzero=0 when the target shape is a
//     constant without 0 (the two then mean the same); a shape that holds
//     0 or is not constant is refused with an error naming the node, and
//     then nothing is changed.
//   - rank-0 axes inputs (Squeeze, Unsqueeze, Reduce*, Slice, Pad) become
//     1-D: the initializer or Constant is rewritten in place, or copied
//     under a new name when something else reads it too.
//
// The changes are listed in the order they were made.
func Sanitize(m *onnxpb.ModelProto) ([]Change, error) {
	if m == nil || m.GetGraph() == nil {
		return nil, errors.New("sanitize: the model has no graph")
	}
	s := &sanitizer{m: m, g: m.GetGraph(), opset: defaultOpset(m)}
	if err := s.checkAllowZero(); err != nil {
		return nil, err
	}
	s.removeGuards()
	s.fixAllowZero()
	s.fixAxes()
	return s.changes, nil
}

type sanitizer struct {
	m       *onnxpb.ModelProto
	g       *onnxpb.GraphProto
	opset   int64
	changes []Change
	names   map[string]bool
}

func (s *sanitizer) index() *graphIndex { return newGraphIndex(s.g, s.opset) }

func (s *sanitizer) add(kind string, n *onnxpb.NodeProto, i int, tensor, detail string) {
	c := Change{Kind: kind, Tensor: tensor, Detail: detail}
	if n != nil {
		c.Node, c.Op = nodeLabel(n, i), n.GetOpType()
	}
	s.changes = append(s.changes, c)
}

// checkAllowZero refuses the model before anything changes when a Reshape
// with allowzero=1 cannot be rewritten.
func (s *sanitizer) checkAllowZero() error {
	x := s.index()
	for i, n := range x.nodes {
		if !isOp(n, "Reshape") || attrInt(n, "allowzero", 0) == 0 {
			continue
		}
		shape, ok := x.ints(input(n, 1))
		if !ok {
			return fmt.Errorf("sanitize: Reshape %s has allowzero=1 and its target shape %q is not a constant; "+
				"cannot tell whether allowzero=0 means the same", nodeLabel(n, i), input(n, 1))
		}
		for _, d := range shape {
			if d == 0 {
				return fmt.Errorf("sanitize: Reshape %s has allowzero=1 and target shape %v holds 0 (an empty dim), "+
					"which allowzero=0 would copy from the input instead; fix the export", nodeLabel(n, i), shape)
			}
		}
	}
	return nil
}

// liveNodes marks nodes whose outputs reach a graph output (or a subgraph,
// or that have no named output at all).
func liveNodes(g *onnxpb.GraphProto, subRefs map[string]bool) []bool {
	need := map[string]bool{}
	for _, o := range g.GetOutput() {
		need[o.GetName()] = true
	}
	for r := range subRefs {
		need[r] = true
	}
	nodes := g.GetNode()
	live := make([]bool, len(nodes))
	for i := len(nodes) - 1; i >= 0; i-- {
		named := false
		for _, o := range nodes[i].GetOutput() {
			if o != "" {
				named = true
			}
			if need[o] {
				live[i] = true
			}
		}
		if !named {
			live[i] = true
		}
		if live[i] {
			for _, in := range nodes[i].GetInput() {
				need[in] = true
			}
		}
	}
	return live
}

func (s *sanitizer) removeGuards() {
	x := s.index()
	before := liveNodes(s.g, x.subRefs)
	removed, dropped := s.rewireGuards(x)
	if len(s.changes) == 0 {
		return
	}
	s.dropDead(x, before, removed, dropped)
	s.dropUnread(dropped, x.subRefs)
}

// rewireGuards points the readers of every Where(IsNaN(v), 0, v) at v (or
// turns the guard into Identity(v) when a graph output or subgraph needs
// its name). It returns the guards to delete and the names that may have
// lost their last reader.
func (s *sanitizer) rewireGuards(x *graphIndex) (removed map[int]bool, dropped map[string]bool) {
	removed, dropped = map[int]bool{}, map[string]bool{}
	for i, w := range x.nodes {
		v, ok := x.isNaNGuard(w)
		if !ok {
			continue
		}
		out := output(w, 0)
		for _, in := range w.GetInput() {
			dropped[in] = true
		}
		if x.graphOut[out] || x.subRefs[out] {
			w.OpType, w.Domain, w.Input, w.Attribute = proto.String("Identity"), nil, []string{v}, nil
			s.add("remove-isnan-guard", w, i, out, fmt.Sprintf("Where(IsNaN(%s), 0, %s) replaced by Identity(%s) (its output is a graph output)", v, v, v))
			continue
		}
		for _, n := range x.nodes {
			for k, in := range n.GetInput() {
				if in == out {
					n.Input[k] = v
				}
			}
		}
		removed[i] = true
		dropped[out] = true
		s.add("remove-isnan-guard", w, i, out, fmt.Sprintf("Where(IsNaN(%s), 0, %s) removed; its readers now read %s", v, v, v))
	}
	return removed, dropped
}

// dropDead deletes the removed guards and every node that was live before
// and is dead now (the IsNaN, the zero Constant); nodes that were already
// dead are not the sanitizer's business and stay.
func (s *sanitizer) dropDead(x *graphIndex, before []bool, removed map[int]bool, dropped map[string]bool) {
	var kept []*onnxpb.NodeProto
	var keptWas []bool
	for i, n := range x.nodes {
		if !removed[i] {
			kept = append(kept, n)
			keptWas = append(keptWas, before[i])
		}
	}
	s.g.Node = kept
	after := liveNodes(s.g, x.subRefs)
	s.g.Node = s.g.Node[:0:0]
	for i, n := range kept {
		if !keptWas[i] || after[i] {
			s.g.Node = append(s.g.Node, n)
			continue
		}
		s.add("remove-node", n, x.indexOf(n), "", "no reader left after the guard removal")
		for _, name := range append(append([]string(nil), n.GetInput()...), n.GetOutput()...) {
			dropped[name] = true
		}
	}
}

// indexOf returns n's position in the index's node list.
func (x *graphIndex) indexOf(n *onnxpb.NodeProto) int {
	for i, m := range x.nodes {
		if m == n {
			return i
		}
	}
	return -1
}

// dropUnread removes initializers and value_info entries among names that
// nothing reads any more.
func (s *sanitizer) dropUnread(names map[string]bool, subRefs map[string]bool) {
	read := map[string]bool{}
	for _, n := range s.g.GetNode() {
		for _, in := range n.GetInput() {
			read[in] = true
		}
		for _, o := range n.GetOutput() {
			read[o] = true // still produced: keep its value_info
		}
	}
	for _, vis := range [][]*onnxpb.ValueInfoProto{s.g.GetInput(), s.g.GetOutput()} {
		for _, vi := range vis {
			read[vi.GetName()] = true
		}
	}
	for r := range subRefs {
		read[r] = true
	}
	var inits []*onnxpb.TensorProto
	for _, t := range s.g.GetInitializer() {
		if names[t.GetName()] && !read[t.GetName()] {
			s.add("remove-initializer", nil, 0, t.GetName(), "no reader left after the guard removal")
			continue
		}
		inits = append(inits, t)
	}
	s.g.Initializer = inits
	var vis []*onnxpb.ValueInfoProto
	for _, vi := range s.g.GetValueInfo() {
		if names[vi.GetName()] && !read[vi.GetName()] {
			continue
		}
		vis = append(vis, vi)
	}
	s.g.ValueInfo = vis
}

func (s *sanitizer) fixAllowZero() {
	x := s.index()
	for i, n := range x.nodes {
		if !isOp(n, "Reshape") {
			continue
		}
		a := attr(n, "allowzero")
		if a == nil || a.GetI() == 0 {
			continue
		}
		shape, _ := x.ints(input(n, 1)) // checkAllowZero proved it constant, without 0
		a.I = proto.Int64(0)
		s.add("set-allowzero", n, i, input(n, 1), fmt.Sprintf("allowzero=1 -> 0: target shape %v has no 0, so both mean the same", shape))
	}
}

// axesUse is a node reading a rank-0 axes constant in its axes slot.
type axesUse struct {
	node, slot int
}

func (s *sanitizer) fixAxes() {
	x := s.index()
	var order []string
	uses := map[string][]axesUse{}
	for i, n := range x.nodes {
		slot := x.axesSlot(n)
		name := input(n, slot)
		if slot < 0 || name == "" {
			continue
		}
		t, ok := x.consts[name]
		if !ok || len(t.GetDims()) != 0 {
			continue
		}
		if _, ok := tensorInts(t); !ok {
			continue
		}
		if _, seen := uses[name]; !seen {
			order = append(order, name)
		}
		uses[name] = append(uses[name], axesUse{i, slot})
	}
	var inserts []constInsert
	for _, name := range order {
		if ins := s.fixAxesTensor(x, name, uses[name]); ins != nil {
			inserts = append(inserts, *ins)
		}
	}
	s.insertConstants(inserts)
}

// constInsert is a Constant node copy to place right after its original.
type constInsert struct {
	after *onnxpb.NodeProto
	node  *onnxpb.NodeProto
}

func (s *sanitizer) fixAxesTensor(x *graphIndex, name string, users []axesUse) *constInsert {
	shared := x.graphOut[name] || x.graphIn[name] || x.subRefs[name] || len(x.consumers[name]) != len(users)
	for _, vi := range s.g.GetInput() {
		if vi.GetName() == name {
			shared = true // an initializer listed as a graph input can be overridden
		}
	}
	var readers []string
	for _, u := range users {
		readers = append(readers, nodeLabel(x.nodes[u.node], u.node))
	}
	first := x.nodes[users[0].node]
	init, isInit := x.inits[name]
	c := x.prod(name)
	if !isInit && !isOp(c, "Constant") {
		return nil // two producers of one name: leave a malformed graph alone
	}
	if !shared {
		if isInit {
			init.Dims = []int64{1}
		} else {
			makeConstant1D(c)
		}
		s.setValueInfo1D(name)
		s.add("axes-to-1d", first, users[0].node, name, fmt.Sprintf("rank-0 axes rewritten as shape [1] (read by %v)", readers))
		return nil
	}
	newName := s.unique(name + "_1d")
	for _, u := range users {
		x.nodes[u.node].Input[u.slot] = newName
	}
	detail := fmt.Sprintf("rank-0 axes copied as %s of shape [1] for %v (the original has other readers)", newName, readers)
	if isInit {
		cp := proto.Clone(init).(*onnxpb.TensorProto)
		cp.Name, cp.Dims = proto.String(newName), []int64{1}
		s.insertInitializerAfter(name, cp)
		s.add("axes-to-1d", first, users[0].node, name, detail)
		return nil
	}
	cp := proto.Clone(c).(*onnxpb.NodeProto)
	cp.Output = []string{newName}
	if c.GetName() != "" {
		cp.Name = proto.String(s.unique(c.GetName() + "_1d"))
	}
	makeConstant1D(cp)
	s.add("axes-to-1d", first, users[0].node, name, detail)
	return &constInsert{after: c, node: cp}
}

// makeConstant1D turns a Constant node's rank-0 integer value into shape [1].
func makeConstant1D(c *onnxpb.NodeProto) {
	for _, a := range c.GetAttribute() {
		switch a.GetName() {
		case "value":
			if a.GetT() != nil {
				a.T.Dims = []int64{1}
			}
		case "value_int":
			v := a.GetI()
			a.Name, a.Type, a.I, a.Ints = proto.String("value_ints"), onnxpb.AttributeProto_INTS.Enum(), nil, []int64{v}
		}
	}
}

func (s *sanitizer) setValueInfo1D(name string) {
	for _, vi := range s.g.GetValueInfo() {
		if vi.GetName() != name {
			continue
		}
		if tt := vi.GetType().GetTensorType(); tt != nil && tt.GetShape() != nil && len(tt.GetShape().GetDim()) == 0 {
			tt.Shape.Dim = []*onnxpb.TensorShapeProto_Dimension{{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: 1}}}
		}
	}
}

func (s *sanitizer) insertInitializerAfter(name string, t *onnxpb.TensorProto) {
	inits := s.g.GetInitializer()
	for i, in := range inits {
		if in.GetName() == name {
			s.g.Initializer = append(inits[:i+1:i+1], append([]*onnxpb.TensorProto{t}, inits[i+1:]...)...)
			return
		}
	}
	s.g.Initializer = append(inits, t)
}

func (s *sanitizer) insertConstants(ins []constInsert) {
	if len(ins) == 0 {
		return
	}
	after := map[*onnxpb.NodeProto][]*onnxpb.NodeProto{}
	for _, c := range ins {
		after[c.after] = append(after[c.after], c.node)
	}
	var nodes []*onnxpb.NodeProto
	for _, n := range s.g.GetNode() {
		nodes = append(nodes, n)
		nodes = append(nodes, after[n]...)
	}
	s.g.Node = nodes
}

// unique returns base, or base_2, base_3, ..., whichever no value, node or
// initializer of the graph uses yet; the name is then taken.
func (s *sanitizer) unique(base string) string {
	if s.names == nil {
		s.names = map[string]bool{}
		for _, n := range s.g.GetNode() {
			s.names[n.GetName()] = true
			for _, v := range append(append([]string(nil), n.GetInput()...), n.GetOutput()...) {
				s.names[v] = true
			}
		}
		for _, t := range s.g.GetInitializer() {
			s.names[t.GetName()] = true
		}
		for _, vis := range [][]*onnxpb.ValueInfoProto{s.g.GetInput(), s.g.GetOutput(), s.g.GetValueInfo()} {
			for _, vi := range vis {
				s.names[vi.GetName()] = true
			}
		}
	}
	name := base
	for k := 2; s.names[name]; k++ {
		name = base + "_" + strconv.Itoa(k)
	}
	s.names[name] = true
	return name
}
