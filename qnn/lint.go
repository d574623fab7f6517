package qnn

import (
	"fmt"
	"sort"
	"strings"

	"sparkconv/onnxpb"
)

// Severity grades a finding: an error stops conversion or quantisation on
// QNN HTP; a warning is a form QNN is documented to accept but this
// project's contract (docs/formats.md#onnx-decode-step) avoids, or a check the lint could
// not complete.
type Severity string

const (
	Error   Severity = "error"
	Warning Severity = "warning"
)

// Finding is one problem Lint found.
type Finding struct {
	Rule     string   `json:"rule"`
	Severity Severity `json:"severity"`
	// Node and Op name the node (Node is "#i" for an unnamed node i); both
	// are empty for model-level findings. Tensor names a tensor when the
	// finding is about one (a graph input, an initializer).
	Node      string `json:"node,omitempty"`
	Op        string `json:"op,omitempty"`
	NodeIndex int    `json:"node_index"`
	Tensor    string `json:"tensor,omitempty"`
	Message   string `json:"message"`
	Fix       string `json:"fix"`
}

func (f Finding) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s [%s]", f.Severity, f.Rule)
	if f.Node != "" {
		fmt.Fprintf(&b, " node %s (%s)", f.Node, f.Op)
	}
	if f.Tensor != "" {
		fmt.Fprintf(&b, " tensor %s", f.Tensor)
	}
	fmt.Fprintf(&b, ": %s. Fix: %s", f.Message, f.Fix)
	return b.String()
}

// Rule describes one check of Lint.
type Rule struct {
	ID       string   `json:"id"`
	Severity Severity `json:"severity"` // the worst severity it reports
	Summary  string   `json:"summary"`
	Source   string   `json:"source"` // where the constraint is documented
}

var ruleTable = []Rule{
	{"no-graph", Error, "the model has no graph", "onnx.proto"},
	{"value-redefined", Error, "a value defined twice: two nodes write it, or a node writes a graph input or initializer", "docs/qnn.md#what-onnxchecker-enforces (SSA)"},
	{"input-undefined", Error, "a node reads a value that no graph input, initializer or node defines", "docs/qnn.md#what-onnxchecker-enforces"},
	{"graph-cycle", Error, "nodes that read each other's outputs in a cycle", "docs/qnn.md#what-onnxchecker-enforces"},
	{"not-topological", Error, "a node reads a value that a later node writes (the graph is not topologically sorted)", "docs/qnn.md#what-onnxchecker-enforces"},
	{"output-not-produced", Error, "a graph output that nothing produces", "docs/qnn.md#what-onnxchecker-enforces"},
	{"ir-version-missing", Error, "ir_version is unset (ONNX Runtime and onnx.checker refuse the model)", "docs/qnn.md#what-onnxchecker-enforces"},
	{"ir-version-too-new", Error, "ir_version above 11: AI Hub's checker (onnx <= 1.18) rejects it", "docs/qnn.md#ir-version-and-opset"},
	{"opset-missing", Error, "no default-domain opset_import", "docs/qnn.md#what-onnxchecker-enforces"},
	{"opset-too-new", Error, "default-domain opset above 23, which needs IR > 11", "docs/qnn.md#ir-version-and-opset"},
	{"unsupported-op", Error, "op without a QAIRT converter translation (see Ops) or in a non-default domain", "docs/qnn.md#converter-op-table"},
	{"erf-outside-gelu", Error, "Erf that is not part of the exact-GELU pattern QNN fuses into Gelu", "docs/qnn.md#exact-gelu"},
	{"erf-gelu-variant", Warning, "exact GELU written as Mul(x, 1/sqrt2) -> Erf: the converter matches it, ORT's QNN EP does not", "docs/qnn.md#exact-gelu"},
	{"rmsnorm-pattern", Error, "RMSNorm that is not Pow(x,2) -> ReduceMean(last axis) -> Add(eps) -> Sqrt -> Div(x, .) -> Mul(weight)", "docs/qnn.md#rmsnorm, docs/formats.md#onnx-decode-step"},
	{"softmax-axis", Error, "Softmax over an axis other than the last", "docs/qnn.md#softmax-axis"},
	{"isnan-guard", Error, "Where(IsNaN(x), 0, x) guard (sparkconv sanitize removes it)", "docs/qnn.md#known-converter-failures"},
	{"isnan", Error, "IsNaN outside a removable guard", "docs/qnn.md#known-converter-failures"},
	{"reshape-allowzero", Error, "Reshape with allowzero=1: the converter rejects it whatever the shape", "docs/qnn.md#known-converter-failures"},
	{"scalar-axes", Error, "axes input that is not a 1-D tensor (rank 0 from the dynamo exporter)", "docs/qnn.md#known-converter-failures"},
	{"axes-not-constant", Error, "axes input that is not a constant: the converter needs static axes", "converter Squeeze/Unsqueeze/Reduce translations"},
	{"shape-not-constant", Error, "Reshape/Expand shape input that is not a constant", "docs/qnn.md#known-converter-failures"},
	{"dynamic-shape", Error, "graph input or output without a fully static shape", "docs/qnn.md#known-converter-failures"},
	{"bool-mask", Error, "boolean tensor: BOOL input/output/initializer, Cast to bool, comparison feeding Where", "docs/formats.md#onnx-decode-step"},
	{"explicit-softmax", Error, "softmax written as Exp -> ReduceSum -> Div (optionally after ReduceMax -> Sub)", "docs/formats.md#onnx-decode-step"},
	{"broadcast-mul-reducesum", Error, "product written as broadcasting Mul followed by ReduceSum instead of MatMul", "docs/formats.md#onnx-decode-step"},
	{"weights-too-large", Error, "a graph whose weights (initializers and Constants, by declared dtype and dims) pass 2 GiB, HTP's limit per context binary", "docs/qnn.md#htps-weight-limit"},
	{"matmul-batch", Error, "MatMul whose operands' batch dims differ (broadcast), or whose inner dims disagree", "docs/formats.md#onnx-decode-step, docs/qnn.md#matmul-broadcasting"},
}

// Rules returns the checks Lint runs.
func Rules() []Rule { return append([]Rule(nil), ruleTable...) }

// Count returns the number of error and warning findings.
func Count(fs []Finding) (errors, warnings int) {
	for _, f := range fs {
		if f.Severity == Error {
			errors++
		} else {
			warnings++
		}
	}
	return errors, warnings
}

// linter collects findings for one model.
type linter struct {
	x   *graphIndex
	out []Finding
}

func (l *linter) model(rule string, sev Severity, msg, fix string) {
	l.out = append(l.out, Finding{Rule: rule, Severity: sev, NodeIndex: -1, Message: msg, Fix: fix})
}

func (l *linter) tensor(rule string, sev Severity, tensor, msg, fix string) {
	l.out = append(l.out, Finding{Rule: rule, Severity: sev, NodeIndex: -1, Tensor: tensor, Message: msg, Fix: fix})
}

func (l *linter) node(rule string, sev Severity, i int, msg, fix string) {
	n := l.x.nodes[i]
	l.out = append(l.out, Finding{Rule: rule, Severity: sev, Node: nodeLabel(n, i), Op: n.GetOpType(),
		NodeIndex: i, Message: msg, Fix: fix})
}

// Lint checks a model against what QNN HTP (QAIRT converter, ORT QNN EP)
// takes; see Rules. Findings are ordered: model and graph-level first, then
// by node order, then rule.
func Lint(m *onnxpb.ModelProto) []Finding {
	l := &linter{}
	if m == nil || m.GetGraph() == nil {
		l.model("no-graph", Error, "the model has no graph", "export a model with a graph")
		return l.out
	}
	opset := defaultOpset(m)
	l.x = newGraphIndex(m.GetGraph(), opset)
	l.checkVersions(m, opset)
	l.checkTopology()
	l.checkIO()
	l.checkInitializers()
	l.checkWeights()
	for i := range l.x.nodes {
		l.checkNode(i)
	}
	sort.SliceStable(l.out, func(i, j int) bool {
		a, b := l.out[i], l.out[j]
		if a.NodeIndex != b.NodeIndex {
			return a.NodeIndex < b.NodeIndex
		}
		return a.Rule < b.Rule
	})
	return l.out
}

func (l *linter) checkVersions(m *onnxpb.ModelProto, opset int64) {
	switch ir := m.GetIrVersion(); {
	case ir <= 0:
		l.model("ir-version-missing", Error, "ir_version is not set",
			"set ir_version to the IR of the opset (8 for opset 17, at most 11)")
	case ir > 11:
		l.model("ir-version-too-new", Error, fmt.Sprintf("ir_version %d is above 11, the highest AI Hub's checker accepts", ir),
			"save with onnx <= 1.18 or set ir_version <= 11 (8 for opset 17)")
	}
	switch {
	case opset <= 0:
		l.model("opset-missing", Error, "no opset_import for the default domain",
			"add opset_import {domain: \"\", version: 17}")
	case opset > 23:
		l.model("opset-too-new", Error, fmt.Sprintf("default-domain opset %d is above 23 (opset 24 needs IR 12, which AI Hub rejects)", opset),
			"export at opset 17 (what Qualcomm's own LLM export uses), at most 23")
	}
}

func (l *linter) checkNode(i int) {
	n := l.x.nodes[i]
	op := n.GetOpType()
	if !SupportedOp(n.GetDomain(), op) && op != "IsNaN" {
		l.unsupported(i)
	}
	if n.GetDomain() != "" && n.GetDomain() != "ai.onnx" {
		return
	}
	switch op {
	case "Erf":
		l.checkErf(i)
	case "ReduceMean":
		l.checkRMSNorm(i)
	case "Softmax", "LogSoftmax":
		l.checkSoftmax(i)
	case "IsNaN":
		l.checkIsNaN(i)
	case "Where":
		l.checkWhere(i)
	case "Reshape":
		l.checkReshape(i)
	case "Expand":
		l.checkShapeInput(i)
	case "Cast":
		l.checkCast(i)
	case "Constant":
		l.checkConstant(i)
	case "Exp":
		l.checkExplicitSoftmax(i)
	case "ReduceSum":
		l.checkMulReduceSum(i)
	case "MatMul":
		l.checkMatMul(i)
	}
	l.checkAxes(i)
}

func (l *linter) unsupported(i int) {
	n := l.x.nodes[i]
	op, dom := n.GetOpType(), n.GetDomain()
	msg := fmt.Sprintf("op %s has no QAIRT converter translation", op)
	fix := "rewrite it with supported ops (qnn.Ops lists them)"
	if dom != "" && dom != "ai.onnx" {
		msg = fmt.Sprintf("op %s is in domain %q; the converter only translates default-domain ops", op, dom)
	}
	if ex, ok := excludedOps[op]; ok && (dom == "" || dom == "ai.onnx") {
		msg += ": " + ex.why
		fix = ex.fix
	}
	l.node("unsupported-op", Error, i, msg, fix)
}

// checkIO finds dynamic or missing shapes and boolean tensors at the graph
// boundary.
func (l *linter) checkIO() {
	for _, side := range []struct {
		what string
		vis  []*onnxpb.ValueInfoProto
	}{{"input", l.x.g.GetInput()}, {"output", l.x.g.GetOutput()}} {
		for _, vi := range side.vis {
			name := vi.GetName()
			if _, isInit := l.x.inits[name]; isInit && side.what == "input" {
				continue
			}
			if msg := staticShapeProblem(vi); msg != "" {
				l.tensor("dynamic-shape", Error, name, fmt.Sprintf("graph %s %s %s", side.what, name, msg),
					"export with fixed sizes (QNN compiles one static shape per graph), e.g. onnx's update_inputs_outputs_dims")
			}
			if vi.GetType().GetTensorType().GetElemType() == int32(onnxpb.TensorProto_BOOL) {
				l.tensor("bool-mask", Error, name, fmt.Sprintf("graph %s %s is BOOL", side.what, name),
					"use an additive float mask (0 visible, mask_value masked) instead of a boolean one")
			}
		}
	}
}

// staticShapeProblem describes why vi's shape is not static ("" if it is).
func staticShapeProblem(vi *onnxpb.ValueInfoProto) string {
	tt := vi.GetType().GetTensorType()
	switch {
	case vi.GetType() == nil:
		return "has no type"
	case tt == nil:
		return "is not a tensor"
	case tt.GetShape() == nil:
		return "has no shape"
	}
	for i, d := range tt.GetShape().GetDim() {
		switch v := d.GetValue().(type) {
		case *onnxpb.TensorShapeProto_Dimension_DimParam:
			return fmt.Sprintf("has symbolic dim %d %q", i, v.DimParam)
		case *onnxpb.TensorShapeProto_Dimension_DimValue:
			if v.DimValue <= 0 {
				return fmt.Sprintf("has dim %d = %d", i, v.DimValue)
			}
		default:
			return fmt.Sprintf("has dim %d with no value", i)
		}
	}
	return ""
}

func (l *linter) checkInitializers() {
	for _, t := range l.x.g.GetInitializer() {
		if t.GetDataType() == int32(onnxpb.TensorProto_BOOL) {
			l.tensor("bool-mask", Error, t.GetName(), fmt.Sprintf("initializer %s is BOOL", t.GetName()),
				"store masks as float additive masks (0 / mask_value)")
		}
	}
}

func (l *linter) checkCast(i int) {
	if attrInt(l.x.nodes[i], "to", 0) == int64(onnxpb.TensorProto_BOOL) {
		l.node("bool-mask", Error, i, "Cast to BOOL makes a boolean tensor",
			"keep masks as float and apply them additively")
	}
}

func (l *linter) checkConstant(i int) {
	if t := constantTensor(l.x.nodes[i]); t != nil && t.GetDataType() == int32(onnxpb.TensorProto_BOOL) {
		l.node("bool-mask", Error, i, "Constant produces a BOOL tensor",
			"use a float additive mask instead of a boolean one")
	}
}
