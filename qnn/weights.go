package qnn

import (
	"fmt"
	"math"
	"strconv"

	"sparkconv/onnxpb"
)

// MaxWeightBytes is the most weight bytes one graph may hold for QNN HTP:
// a context binary whose weights exceed 2 GiB is refused (the NPU maps a
// context through a 32-bit address space), which is why Qualcomm's own LLM
// exports split a model into parts (docs/qnn.md#htps-weight-limit).
const MaxWeightBytes int64 = 1 << 31

// Weights is what a graph's constants declare: their bytes by data type
// and dims, never by reading the data, so external initializers count as
// much as inline ones.
type Weights struct {
	Bytes     int64 // saturates at math.MaxInt64
	Tensors   int   // initializers and Constant tensors counted
	Malformed int   // tensors whose dims are negative (not counted)
	Overflow  bool  // a tensor's or the total's size passes int64
}

// GraphWeights counts the weight bytes of g: every initializer and every
// Constant node's tensor, by declared data type (4-bit types at half a
// byte) times element count. A type without a fixed width (strings, an
// unknown code) counts its stored bytes: the strings, raw_data, or the
// external data's declared length.
func GraphWeights(g *onnxpb.GraphProto) Weights {
	var w Weights
	add := func(t *onnxpb.TensorProto) {
		if t == nil {
			return
		}
		n, ok := tensorBytes(t)
		switch {
		case !ok:
			w.Malformed++
			return
		case n < 0:
			w.Overflow = true
			w.Bytes = math.MaxInt64
		case w.Bytes > math.MaxInt64-n:
			w.Overflow = true
			w.Bytes = math.MaxInt64
		default:
			w.Bytes += n
		}
		w.Tensors++
	}
	for _, t := range g.GetInitializer() {
		add(t)
	}
	for _, n := range g.GetNode() {
		if n.GetOpType() == "Constant" && (n.GetDomain() == "" || n.GetDomain() == "ai.onnx") {
			add(constantTensor(n))
		}
	}
	return w
}

// tensorBytes is t's declared size: ok is false for negative dims, and n
// is -1 when the size passes int64.
func tensorBytes(t *onnxpb.TensorProto) (n int64, ok bool) {
	dims := t.GetDims()
	for _, d := range dims {
		if d < 0 {
			return 0, false
		}
	}
	bits := elemBits(t.GetDataType())
	if bits == 0 {
		return storedBytes(t), true
	}
	count := numel(dims, math.MaxInt64/bits)
	if count < 0 {
		return -1, true
	}
	return (count*bits + 7) / 8, true
}

// elemBits is the width of an ONNX element type in bits (0: no fixed
// width, or a code this table does not know).
func elemBits(dt int32) int64 {
	switch onnxpb.TensorProto_DataType(dt) {
	case onnxpb.TensorProto_INT4, onnxpb.TensorProto_UINT4, onnxpb.TensorProto_FLOAT4E2M1:
		return 4
	case onnxpb.TensorProto_FLOAT8E4M3FN, onnxpb.TensorProto_FLOAT8E4M3FNUZ, onnxpb.TensorProto_FLOAT8E5M2,
		onnxpb.TensorProto_FLOAT8E5M2FNUZ, onnxpb.TensorProto_FLOAT8E8M0:
		return 8
	case onnxpb.TensorProto_COMPLEX64:
		return 64
	case onnxpb.TensorProto_COMPLEX128:
		return 128
	}
	return int64(elemSize(dt)) * 8
}

// storedBytes is what a tensor of no fixed element width holds: its
// strings, its raw_data, or the length its external data declares.
func storedBytes(t *onnxpb.TensorProto) int64 {
	var n int64
	for _, s := range t.GetStringData() {
		n += int64(len(s))
	}
	n += int64(len(t.GetRawData()))
	for _, kv := range t.GetExternalData() {
		if kv.GetKey() == "length" {
			if v, err := strconv.ParseInt(kv.GetValue(), 10, 64); err == nil && v > 0 && n <= math.MaxInt64-v {
				n += v
			}
		}
	}
	return n
}

// checkWeights refuses a graph whose weights pass MaxWeightBytes.
func (l *linter) checkWeights() {
	w := GraphWeights(l.x.g)
	if w.Bytes <= MaxWeightBytes {
		return
	}
	name := l.x.g.GetName()
	if name == "" {
		name = "(unnamed)"
	}
	size := fmt.Sprintf("%d bytes (%.2f GiB) of weights in %d tensors", w.Bytes, float64(w.Bytes)/(1<<30), w.Tensors)
	split := fmt.Sprintf("split it into at least %d graphs", (w.Bytes-1)/MaxWeightBytes+1)
	if w.Overflow {
		size = fmt.Sprintf("weights in %d tensors whose declared sizes pass 2^63 bytes", w.Tensors)
		split = "check the initializers' dims, and split the graph"
	}
	l.model("weights-too-large", Error,
		fmt.Sprintf("graph %s holds %s, above HTP's limit of %d bytes (2 GiB) per context binary", name, size, MaxWeightBytes),
		split+" of at most 2 GiB of weights each: `sparkconv export-onnx --layers A-B` exports a range of layers "+
			"(one graph per layer by default, 4 with --granularity block), and the embedding and the head "+
			"go in graphs of their own (docs/qnn.md#htps-weight-limit gives the bytes per graph)")
}
