package qnn

import (
	"fmt"

	"sparkconv/onnxpb"
)

// use is one place a tensor is read: input slot of node.
type use struct {
	node, slot int
}

// graphIndex answers the questions the rules ask about one graph: who
// produces and who reads a tensor, which tensors are constant, and what
// their shapes are (declared or inferred).
type graphIndex struct {
	g         *onnxpb.GraphProto
	opset     int64
	nodes     []*onnxpb.NodeProto
	producer  map[string]int
	consumers map[string][]use
	// inits are the graph initializers; consts also holds the outputs of
	// Constant nodes (as tensors).
	inits    map[string]*onnxpb.TensorProto
	consts   map[string]*onnxpb.TensorProto
	graphIn  map[string]bool // runtime inputs (not initializers)
	graphOut map[string]bool
	// subRefs are names read by nodes of subgraphs (outer-scope reads).
	subRefs map[string]bool
	shapes  map[string][]int64 // -1 = unknown dim; absent = unknown rank
	elem    map[string]int32
}

func newGraphIndex(g *onnxpb.GraphProto, opset int64) *graphIndex {
	x := &graphIndex{
		g: g, opset: opset, nodes: g.GetNode(),
		producer: map[string]int{}, consumers: map[string][]use{},
		inits: map[string]*onnxpb.TensorProto{}, consts: map[string]*onnxpb.TensorProto{},
		graphIn: map[string]bool{}, graphOut: map[string]bool{}, subRefs: map[string]bool{},
		shapes: map[string][]int64{}, elem: map[string]int32{},
	}
	for _, t := range g.GetInitializer() {
		x.inits[t.GetName()] = t
		x.consts[t.GetName()] = t
	}
	for _, vi := range g.GetInput() {
		if _, isInit := x.inits[vi.GetName()]; !isInit {
			x.graphIn[vi.GetName()] = true
		}
	}
	for _, vi := range g.GetOutput() {
		x.graphOut[vi.GetName()] = true
	}
	for i, n := range x.nodes {
		for slot, in := range n.GetInput() {
			if in != "" {
				x.consumers[in] = append(x.consumers[in], use{i, slot})
			}
		}
		for _, out := range n.GetOutput() {
			if out == "" {
				continue
			}
			if _, dup := x.producer[out]; !dup {
				x.producer[out] = i
			}
		}
		if n.GetOpType() == "Constant" && n.GetDomain() == "" && len(n.GetOutput()) == 1 {
			if t := constantTensor(n); t != nil {
				x.consts[n.GetOutput()[0]] = t
			}
		}
		for _, a := range n.GetAttribute() {
			collectSubgraphReads(a, x.subRefs, 0)
		}
	}
	x.inferShapes()
	return x
}

// collectSubgraphReads adds every name read inside the subgraphs of a.
func collectSubgraphReads(a *onnxpb.AttributeProto, into map[string]bool, depth int) {
	if depth > 64 {
		return
	}
	graphs := append([]*onnxpb.GraphProto(nil), a.GetGraphs()...)
	if a.GetG() != nil {
		graphs = append(graphs, a.GetG())
	}
	for _, sg := range graphs {
		for _, n := range sg.GetNode() {
			for _, in := range n.GetInput() {
				into[in] = true
			}
			for _, sa := range n.GetAttribute() {
				collectSubgraphReads(sa, into, depth+1)
			}
		}
	}
}

// node returns the producer of tensor name, or nil.
func (x *graphIndex) prod(name string) *onnxpb.NodeProto {
	if i, ok := x.producer[name]; ok {
		return x.nodes[i]
	}
	return nil
}

// readers returns the nodes reading name (each node once).
func (x *graphIndex) readers(name string) []*onnxpb.NodeProto {
	var out []*onnxpb.NodeProto
	seen := map[int]bool{}
	for _, u := range x.consumers[name] {
		if !seen[u.node] {
			seen[u.node] = true
			out = append(out, x.nodes[u.node])
		}
	}
	return out
}

// soleReader returns the only node reading name, provided name is not also
// a graph output or read by a subgraph (fusion needs private intermediates).
func (x *graphIndex) soleReader(name string) *onnxpb.NodeProto {
	r := x.readers(name)
	if len(r) != 1 || x.graphOut[name] || x.subRefs[name] {
		return nil
	}
	return r[0]
}

// scalar returns the value of a constant with exactly one element.
func (x *graphIndex) scalar(name string) (float64, bool) {
	v, ok := tensorFloats(x.consts[name])
	if !ok || len(v) != 1 {
		return 0, false
	}
	return v[0], true
}

// scalarNear reports whether name is a one-element constant within tol of want.
func (x *graphIndex) scalarNear(name string, want, tol float64) bool {
	v, ok := x.scalar(name)
	return ok && v-want <= tol && want-v <= tol
}

// ints returns the values of an integer constant.
func (x *graphIndex) ints(name string) ([]int64, bool) {
	return tensorInts(x.consts[name])
}

// rank returns the known rank of name, or -1.
func (x *graphIndex) rank(name string) int {
	if s, ok := x.shapes[name]; ok {
		return len(s)
	}
	return -1
}

func attr(n *onnxpb.NodeProto, name string) *onnxpb.AttributeProto {
	for _, a := range n.GetAttribute() {
		if a.GetName() == name {
			return a
		}
	}
	return nil
}

func attrInt(n *onnxpb.NodeProto, name string, def int64) int64 {
	if a := attr(n, name); a != nil {
		return a.GetI()
	}
	return def
}

func input(n *onnxpb.NodeProto, i int) string {
	if i >= 0 && i < len(n.GetInput()) {
		return n.GetInput()[i]
	}
	return ""
}

func output(n *onnxpb.NodeProto, i int) string {
	if i >= 0 && i < len(n.GetOutput()) {
		return n.GetOutput()[i]
	}
	return ""
}

// otherInput returns the input of binary node n that is not name, and
// whether name is one of its two inputs.
func otherInput(n *onnxpb.NodeProto, name string) (string, bool) {
	if len(n.GetInput()) != 2 {
		return "", false
	}
	a, b := n.GetInput()[0], n.GetInput()[1]
	switch name {
	case a:
		return b, true
	case b:
		return a, true
	}
	return "", false
}

func isOp(n *onnxpb.NodeProto, op string) bool {
	return n != nil && n.GetOpType() == op && (n.GetDomain() == "" || n.GetDomain() == "ai.onnx")
}

// nodeLabel names a node for messages: its name, or its index when unnamed.
func nodeLabel(n *onnxpb.NodeProto, i int) string {
	if n.GetName() != "" {
		return n.GetName()
	}
	return fmt.Sprintf("#%d", i)
}

// defaultOpset returns the default-domain opset of m (0 when absent).
func defaultOpset(m *onnxpb.ModelProto) int64 {
	for _, o := range m.GetOpsetImport() {
		if o.GetDomain() == "" || o.GetDomain() == "ai.onnx" {
			return o.GetVersion()
		}
	}
	return 0
}
