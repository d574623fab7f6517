package qnn

import "sort"

// OpSupport is one row of the table of ONNX ops (default domain) that the
// QAIRT converter translates for QNN HTP.
type OpSupport struct {
	Op string `json:"op"`
	// Versions are the op schema versions the converter registers
	// (register_op_schema); it picks the newest one not above the model's
	// opset, so an op is usable at any opset from the first of them on.
	Versions []int `json:"versions"`
	// Source is the converter file that registers the translation.
	Source string `json:"source"`
	// Note is a documented restriction ("" when none).
	Note string `json:"note,omitempty"`
}

// Sources of the table. The converter files are an unofficial public upload
// of QAIRT's qti.aisw.converters (exact SDK version unknown, "Confidential
// and Proprietary" headers), repository zhiyuan8/qnn, read at commit
// b590869b05f24f299dbede66514ed6e8c95aec70 (2025-03-31), as docs/qnn.md#converter-op-table and
// its snapshot table describe. Notes quote Qualcomm's "Supported ONNX Ops"
// page (docs.qualcomm.com 80-63442-10) or the converter code.
const (
	srcMath = "zhiyuan8/qnn onnx/math_translations.py"
	srcData = "zhiyuan8/qnn onnx/data_translations.py"
	srcNN   = "zhiyuan8/qnn onnx/nn_translations.py"
	srcRNN  = "zhiyuan8/qnn onnx/rnn_translations.py"
	srcBase = "zhiyuan8/qnn onnx/onnx_translations.py"
)

// opTable lists every default-domain op with a converter translation.
// Erf and Where are listed because the converter translates them; the
// erf-outside-gelu and isnan-guard rules restrict how they may appear.
var opTable = []OpSupport{
	{"Abs", []int{1, 6, 13}, srcMath, ""},
	{"Add", []int{1, 6, 7, 13, 14}, srcMath, ""},
	{"And", []int{1, 7}, srcMath, "boolean; see bool-mask"},
	{"ArgMax", []int{1, 11, 12, 13}, srcMath, "only select_last_index=0"},
	{"ArgMin", []int{1, 11, 12, 13}, srcMath, "only select_last_index=0"},
	{"Asin", []int{7}, srcMath, ""},
	{"Atan", []int{7}, srcMath, ""},
	{"AveragePool", []int{1, 7, 10, 11, 19}, srcNN, "dilation 1 only"},
	{"BatchNormalization", []int{1, 6, 7, 9, 14, 15}, srcNN, "inference mode, static statistics"},
	{"Cast", []int{1, 6, 9, 13}, srcData, ""},
	{"Ceil", []int{1, 6, 13}, srcMath, ""},
	{"Clip", []int{1, 6, 11, 12}, srcData, "min/max must be constant"},
	{"Concat", []int{1, 4, 11, 13}, srcData, ""},
	{"Constant", []int{1, 9, 11, 12, 13}, srcData, "no sparse_value"},
	{"ConstantOfShape", []int{9}, srcData, "static shape input only"},
	{"Conv", []int{1, 11}, srcNN, ""},
	{"ConvTranspose", []int{1, 11}, srcNN, ""},
	{"Cos", []int{7}, srcMath, ""},
	{"CumSum", []int{11, 14}, srcMath, "constant axis"},
	{"DepthToSpace", []int{1, 11, 13}, srcNN, ""},
	{"DequantizeLinear", []int{10, 13, 19, 21}, srcData, "constant scale and zero point; output float32 only"},
	{"Div", []int{1, 6, 7, 13, 14}, srcMath, ""},
	{"Dropout", []int{1, 6, 7, 10}, srcBase, "inference no-op; mask output not produced"},
	{"Einsum", []int{12}, srcMath, "explicit two-operand MatMul/transpose equations only"},
	{"Elu", []int{1, 6}, srcMath, ""},
	{"Equal", []int{1, 7, 11, 13}, srcMath, "boolean output; see bool-mask"},
	{"Erf", []int{9, 13}, srcMath, "only inside the exact-GELU pattern (erf-outside-gelu)"},
	{"Exp", []int{1, 6, 13}, srcMath, ""},
	{"Expand", []int{8, 13}, srcData, "static shape input only"},
	{"Flatten", []int{1, 9, 11, 13}, srcData, ""},
	{"Floor", []int{1, 6}, srcMath, ""},
	{"GRU", nil, srcRNN, "versions not transcribed"},
	{"Gather", []int{1, 11, 13}, srcData, ""},
	{"GatherElements", []int{11, 13}, srcData, ""},
	{"GatherND", []int{11, 12, 13}, srcData, ""},
	{"Gelu", []int{20}, srcNN, "approximate=tanh is ignored with a warning"},
	{"Gemm", []int{1, 6, 7, 9, 11, 13}, srcMath, "as a fully connected layer"},
	{"GlobalAveragePool", []int{1}, srcNN, ""},
	{"GlobalMaxPool", []int{1}, srcNN, ""},
	{"Greater", []int{1, 7, 9, 13}, srcMath, "boolean output; see bool-mask"},
	{"GreaterOrEqual", []int{12}, srcMath, "boolean output; see bool-mask"},
	{"GridSample", []int{16, 20}, srcNN, ""},
	{"GroupNormalization", []int{18, 21}, srcNN, ""},
	{"HardSigmoid", []int{1, 6}, srcMath, ""},
	{"HardSwish", []int{14}, srcData, ""},
	{"Identity", []int{1, 13, 14, 16}, srcMath, ""},
	{"InstanceNormalization", []int{1, 6}, srcNN, ""},
	{"LRN", []int{1, 13}, srcNN, ""},
	{"LSTM", []int{1, 7, 14}, srcRNN, ""},
	{"LayerNormalization", []int{17}, srcNN, "single output"},
	{"LeakyRelu", []int{1, 6}, srcNN, ""},
	{"Less", []int{1, 7, 9, 13}, srcMath, "boolean output; see bool-mask"},
	{"LessOrEqual", []int{12}, srcMath, "boolean output; see bool-mask"},
	{"Log", []int{1, 6, 13}, srcMath, ""},
	{"LogSoftmax", []int{1, 11}, srcMath, ""},
	{"LpNormalization", []int{1}, srcMath, "p=2 only"},
	{"LpPool", []int{1, 2, 11, 18}, srcNN, ""},
	{"MatMul", []int{1, 9, 13}, srcMath, "rank >= 2 after expansion; see matmul-batch"},
	{"Max", []int{1, 6, 8, 12, 13}, srcMath, ""},
	{"MaxPool", []int{1, 8, 10, 11, 12}, srcNN, "no indices output"},
	{"MaxRoiPool", []int{1}, srcNN, ""},
	{"Mean", []int{1, 6, 8, 13}, srcMath, ""},
	{"Min", []int{1, 6, 8, 12, 13}, srcMath, ""},
	{"Mod", []int{10, 13}, srcMath, ""},
	{"Mul", []int{1, 6, 7, 13, 14}, srcMath, ""},
	{"Neg", []int{1, 6, 13}, srcMath, ""},
	{"NonMaxSuppression", []int{10, 11}, srcNN, "static thresholds"},
	{"NonZero", []int{9, 13}, srcData, ""},
	{"Not", []int{1}, srcMath, "boolean; see bool-mask"},
	{"OneHot", []int{9, 11}, srcData, ""},
	{"Or", []int{1, 7}, srcMath, "boolean; see bool-mask"},
	{"PRelu", []int{1, 6, 7, 9}, srcNN, ""},
	{"Pad", []int{1, 2, 11, 13, 18, 19, 21}, srcData, "constant pads"},
	{"Pow", []int{1, 7, 12, 13, 15}, srcMath, "Pow(x, 2) becomes Mul(x, x)"},
	{"QLinearConv", []int{10}, srcNN, ""},
	{"QLinearMatMul", []int{10, 21}, srcMath, ""},
	{"QuantizeLinear", []int{10, 13, 19, 21}, srcData, "constant scale and zero point"},
	{"RNN", nil, srcRNN, "versions not transcribed"},
	{"Range", []int{11}, srcData, "all inputs static (folded at conversion)"},
	{"Reciprocal", []int{1, 6}, srcMath, "translated to Div(1, x)"},
	{"ReduceL2", []int{1, 11, 13, 18}, srcMath, "constant axes"},
	{"ReduceLogSumExp", []int{1, 11, 13, 18}, srcMath, "constant axes"},
	{"ReduceMax", []int{1, 11, 12, 13, 18, 20}, srcMath, "constant axes"},
	{"ReduceMean", []int{1, 11, 13, 18}, srcMath, "constant axes"},
	{"ReduceMin", []int{1, 11, 12, 13, 18, 20}, srcMath, "constant axes"},
	{"ReduceProd", []int{1, 11, 13, 18}, srcMath, "constant axes"},
	{"ReduceSum", []int{1, 11, 13}, srcMath, "constant axes"},
	{"ReduceSumSquare", []int{1, 11, 13, 18}, srcMath, "constant axes"},
	{"Relu", []int{1, 6}, srcMath, ""},
	{"Reshape", []int{1, 5, 13, 14}, srcData, "constant shape; allowzero=0 only"},
	{"Resize", []int{10, 11, 13, 18, 19}, srcData, "rank 3-5, static scales/sizes"},
	{"RoiAlign", []int{10, 16}, srcNN, "coordinate_transformation_mode=output_half_pixel"},
	{"Round", []int{11}, srcMath, ""},
	{"Scatter", []int{9, 11}, srcData, ""},
	{"ScatterElements", []int{11, 13, 16}, srcData, ""},
	{"ScatterND", []int{11, 13, 16}, srcData, ""},
	{"Selu", []int{1, 6}, srcMath, ""},
	{"Shape", []int{1, 13, 15}, srcData, "computed at conversion time only"},
	{"Sigmoid", []int{1, 6, 13}, srcMath, ""},
	{"Sign", []int{13}, srcMath, ""},
	{"Sin", []int{7}, srcMath, ""},
	{"Slice", []int{1, 10, 11, 13}, srcData, "constant starts/ends/axes/steps"},
	{"Softmax", []int{1, 11, 13}, srcMath, "HTP: last axis only (softmax-axis)"},
	{"Softplus", []int{1}, srcMath, ""},
	{"SpaceToDepth", []int{1, 13}, srcNN, ""},
	{"Split", []int{1, 2, 11, 13, 18}, srcData, "constant split sizes"},
	{"Sqrt", []int{1, 6, 13}, srcMath, ""},
	{"Squeeze", []int{1, 11, 13}, srcData, "constant axes"},
	{"Sub", []int{1, 6, 7, 13, 14}, srcMath, ""},
	{"Sum", []int{1, 6, 8, 13}, srcMath, ""},
	{"Tanh", []int{1, 6, 13}, srcMath, ""},
	{"ThresholdedRelu", []int{10}, srcNN, ""},
	{"Tile", []int{1, 6, 13}, srcData, "constant repeats"},
	{"TopK", []int{1, 10, 11}, srcMath, "constant k"},
	{"Transpose", []int{1, 13}, srcData, ""},
	{"Unsqueeze", []int{1, 11, 13}, srcData, "constant axes"},
	{"Upsample", []int{1, 7, 9}, srcData, ""},
	{"Where", []int{9, 16}, srcData, "not as an IsNaN guard (isnan-guard)"},
	{"Xor", []int{1, 7}, srcMath, "boolean; see bool-mask"},
}

// excludedOps are ops people meet in LLM exports that have no converter
// translation in the snapshot: why, and what to write instead.
var excludedOps = map[string]struct{ why, fix string }{
	"IsNaN": {"absent from the Mar-2025 converter snapshot; QNN EP takes float32/float16 only (docs/qnn.md#known-converter-failures)",
		"drop the NaN check (sparkconv sanitize removes Where(IsNaN(x), 0, x) guards)"},
	"IsInf": {"absent from the Mar-2025 converter snapshot (docs/qnn.md#converter-op-table)", "drop the check; keep masks finite"},
	"RMSNormalization": {"ONNX-23 op absent from the converter snapshot (QNN EP has it) (docs/qnn.md#rmsnorm)",
		"write Pow(x,2) -> ReduceMean(last axis) -> Add(eps) -> Sqrt -> Div(x, .) -> Mul(weight)"},
	"SimplifiedLayerNormalization": {"ONNX Runtime contrib op, unknown to onnx.checker and the converter (docs/qnn.md#rmsnorm, docs/qnn.md#converter-op-table)",
		"write Pow(x,2) -> ReduceMean(last axis) -> Add(eps) -> Sqrt -> Div(x, .) -> Mul(weight)"},
	"RotaryEmbedding": {"no converter translation (docs/qnn.md#converter-op-table)", "write rotate_half with Split, Mul, Sub, Add and Concat"},
	"Attention":       {"no converter translation (docs/qnn.md#converter-op-table)", "write MatMul -> Softmax(last axis) -> MatMul"},
	"If": {"control flow: the converter only folds it or turns it into Select, QNN EP rejects it (docs/qnn.md#known-converter-failures)",
		"export one graph per branch; a decode step needs no control flow"},
	"Loop": {"control flow is not supported (docs/qnn.md#known-converter-failures)", "unroll it at export time"},
	"Scan": {"control flow is not supported (docs/qnn.md#known-converter-failures)", "unroll it at export time"},
}

var opIndex = func() map[string]*OpSupport {
	m := make(map[string]*OpSupport, len(opTable))
	for i := range opTable {
		m[opTable[i].Op] = &opTable[i]
	}
	return m
}()

// Ops returns the supported-op table, sorted by op name.
func Ops() []OpSupport {
	out := append([]OpSupport(nil), opTable...)
	sort.Slice(out, func(i, j int) bool { return out[i].Op < out[j].Op })
	return out
}

// SupportedOp reports whether the converter translates op in domain
// ("" and "ai.onnx" are the default domain; no other domain is supported).
func SupportedOp(domain, op string) bool {
	if domain != "" && domain != "ai.onnx" {
		return false
	}
	_, ok := opIndex[op]
	return ok
}
