package qnnbundle

import (
	"encoding/binary"
	"fmt"
	"math"

	"sparkconv/onnxpb"

	"google.golang.org/protobuf/proto"
	"sparkconv/qnn"
)

// QDQDomain is where the simulation's QuantizeLinear/DequantizeLinear come
// from: ONNX Runtime's com.microsoft ops take uint16/int16 at any default
// opset, so the exported graph keeps its opset 17 (the default domain's
// uint16 Q/DQ needs opset 21, where ReduceMean's axes attribute is gone).
const QDQDomain = "com.microsoft"

// QDQModel returns a copy of the float graph m with the encodings applied
// the way QNN applies them: every parameter with an encoding is stored as
// integers (int8/int16, symmetric, per channel on its axis) and
// dequantized by a DequantizeLinear node; every activation with an
// encoding passes QuantizeLinear -> DequantizeLinear (uint8/uint16, zero
// point -offset) right where it is produced, so every reader and the graph
// outputs see the quantized value. Tensors without an encoding (the
// interiors of fused patterns) stay float. m is not modified.
func QDQModel(m *onnxpb.ModelProto, enc *qnn.Encodings, params []qnn.Param) (*onnxpb.ModelProto, error) {
	// Clone all but the initializers (shared, read only: a 1 GB head is
	// not copied a second time).
	src := m.GetGraph()
	weights := src.GetInitializer()
	src.Initializer = nil
	out := proto.Clone(m).(*onnxpb.ModelProto)
	src.Initializer = weights
	g := out.Graph
	g.Initializer = weights
	acts := map[string]qnn.Encoding{}
	for _, e := range enc.Activations {
		acts[e.Name] = e
	}
	axis := map[string]int{}
	for _, p := range params {
		axis[p.Name] = p.Axis
	}
	var head []*onnxpb.NodeProto
	var inits []*onnxpb.TensorProto
	for _, t := range g.Initializer {
		e, ok := findEnc(enc.Params, t.GetName())
		if !ok {
			inits = append(inits, t)
			continue
		}
		qt, scale, zp, err := quantizeParam(t, e, axis[t.GetName()])
		if err != nil {
			return nil, err
		}
		inits = append(inits, qt, scale, zp)
		dq := &onnxpb.NodeProto{Name: proto.String(t.GetName() + "/DequantizeLinear"), OpType: proto.String("DequantizeLinear"),
			Domain: proto.String(QDQDomain), Input: []string{qt.GetName(), scale.GetName(), zp.GetName()}, Output: []string{t.GetName()}}
		if e.EncType == qnn.PerChannel || e.EncType == qnn.LPBQ {
			dq.Attribute = []*onnxpb.AttributeProto{{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(int64(axis[t.GetName()]))}}
		}
		head = append(head, dq)
	}
	qdq := func(src, dst string, e qnn.Encoding) ([]*onnxpb.NodeProto, error) {
		if e.EncType != qnn.PerTensor {
			return nil, fmt.Errorf("activation %s: %s encoding (activations are per tensor)", e.Name, e.EncType)
		}
		scale, zp, err := actQParams(e)
		if err != nil {
			return nil, err
		}
		inits = append(inits, scale, zp)
		q := dst + "/q"
		return []*onnxpb.NodeProto{
			{Name: proto.String(dst + "/QuantizeLinear"), OpType: proto.String("QuantizeLinear"), Domain: proto.String(QDQDomain),
				Input: []string{src, scale.GetName(), zp.GetName()}, Output: []string{q}},
			{Name: proto.String(dst + "/DequantizeLinear"), OpType: proto.String("DequantizeLinear"), Domain: proto.String(QDQDomain),
				Input: []string{q, scale.GetName(), zp.GetName()}, Output: []string{dst}},
		}, nil
	}
	// Graph inputs: quantize at the start, readers read the dequantized copy.
	rename := map[string]string{}
	for _, vi := range g.Input {
		e, ok := acts[vi.GetName()]
		if !ok {
			continue
		}
		dst := vi.GetName() + "/dq"
		nodes, err := qdq(vi.GetName(), dst, e)
		if err != nil {
			return nil, err
		}
		head = append(head, nodes...)
		rename[vi.GetName()] = dst
	}
	nodes := head
	for _, n := range g.Node {
		for i, in := range n.Input {
			if r, ok := rename[in]; ok {
				n.Input[i] = r
			}
		}
		var after []*onnxpb.NodeProto
		for i, o := range n.Output {
			e, ok := acts[o]
			if !ok {
				continue
			}
			f := o + "/float"
			n.Output[i] = f
			qn, err := qdq(f, o, e)
			if err != nil {
				return nil, err
			}
			after = append(after, qn...)
		}
		nodes = append(nodes, n)
		nodes = append(nodes, after...)
	}
	g.Node, g.Initializer = nodes, inits
	out.OpsetImport = append(out.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: proto.String(QDQDomain), Version: proto.Int64(1)})
	return out, nil
}

func findEnc(list []qnn.Encoding, name string) (qnn.Encoding, bool) {
	for _, e := range list {
		if e.Name == name {
			return e, true
		}
	}
	return qnn.Encoding{}, false
}

func floatTensor(name string, dims []int64, v []float32) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), Dims: dims, DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), FloatData: v}
}

// actQParams returns the scale and the unsigned zero point (-offset) of an
// asymmetric activation grid.
func actQParams(e qnn.Encoding) (scale, zp *onnxpb.TensorProto, err error) {
	z := -int64(e.Offset[0])
	hi := int64(1)<<e.BW - 1
	if z < 0 || z > hi {
		return nil, nil, fmt.Errorf("activation %s: zero point %d outside [0, %d]", e.Name, z, hi)
	}
	scale = floatTensor(e.Name+"/scale", nil, []float32{e.Scale[0]})
	zp = &onnxpb.TensorProto{Name: proto.String(e.Name + "/zero_point")}
	switch e.BW {
	case 8:
		zp.DataType, zp.RawData = proto.Int32(int32(onnxpb.TensorProto_UINT8)), []byte{byte(z)}
	case 16:
		zp.DataType, zp.RawData = proto.Int32(int32(onnxpb.TensorProto_UINT16)), binary.LittleEndian.AppendUint16(nil, uint16(z))
	default:
		return nil, nil, fmt.Errorf("activation %s: %d-bit grids are not simulated (8 or 16)", e.Name, e.BW)
	}
	return scale, zp, nil
}

// quantizeParam rounds a float initializer onto its symmetric grid: signed
// integers q = clamp(round(w / scale), -2^(bw-1), 2^(bw-1) - 1), with the
// scale per channel of axis (or one), zero point 0.
func quantizeParam(t *onnxpb.TensorProto, e qnn.Encoding, axis int) (q, scale, zp *onnxpb.TensorProto, err error) {
	w, err := tensorFloat32(t)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("parameter %s: %w", t.GetName(), err)
	}
	if !e.IsSym {
		return nil, nil, nil, fmt.Errorf("parameter %s: asymmetric parameter grids are not simulated", t.GetName())
	}
	if e.EncType == qnn.LPBQ {
		return quantizeLPBQ(t, w, e, axis)
	}
	cols := 1
	if e.EncType == qnn.PerChannel {
		if axis != len(t.Dims)-1 || int64(len(e.Scale)) != t.Dims[axis] {
			return nil, nil, nil, fmt.Errorf("parameter %s: %d channel scales for dims %v axis %d", t.GetName(), len(e.Scale), t.Dims, axis)
		}
		cols = len(e.Scale)
	}
	lo, hi := -math.Exp2(float64(e.BW-1)), math.Exp2(float64(e.BW-1))-1
	name := t.GetName()
	q = &onnxpb.TensorProto{Name: proto.String(name + "/q"), Dims: t.Dims}
	zp = &onnxpb.TensorProto{Name: proto.String(name + "/zero_point")}
	var zdims []int64
	if e.EncType == qnn.PerChannel {
		zdims = []int64{int64(cols)}
	}
	zp.Dims = zdims
	switch e.BW {
	case 4, 8: // 4-bit codes held in int8, as DequantizeLinear reads them alike
		q.DataType, zp.DataType = proto.Int32(int32(onnxpb.TensorProto_INT8)), proto.Int32(int32(onnxpb.TensorProto_INT8))
		q.RawData, zp.RawData = make([]byte, len(w)), make([]byte, cols)
	case 16:
		q.DataType, zp.DataType = proto.Int32(int32(onnxpb.TensorProto_INT16)), proto.Int32(int32(onnxpb.TensorProto_INT16))
		q.RawData, zp.RawData = make([]byte, 2*len(w)), make([]byte, 2*cols)
	default:
		return nil, nil, nil, fmt.Errorf("parameter %s: %d-bit grids are not simulated (4, 8 or 16)", name, e.BW)
	}
	for i, v := range w {
		s := float64(e.Scale[i%cols])
		iq := math.Max(lo, math.Min(hi, math.RoundToEven(float64(v)/s)))
		if e.BW <= 8 {
			q.RawData[i] = byte(int8(iq))
		} else {
			binary.LittleEndian.PutUint16(q.RawData[2*i:], uint16(int16(iq)))
		}
	}
	return q, floatTensor(name+"/scale", zdims, e.Scale), zp, nil
}

// tensorFloat32 returns a float32 initializer's values.
func tensorFloat32(t *onnxpb.TensorProto) ([]float32, error) {
	if t.GetDataType() != int32(onnxpb.TensorProto_FLOAT) {
		return nil, fmt.Errorf("element type %d, want float32", t.GetDataType())
	}
	if len(t.FloatData) > 0 {
		return t.FloatData, nil
	}
	if t.GetDataLocation() == onnxpb.TensorProto_EXTERNAL || len(t.GetExternalData()) > 0 {
		return nil, fmt.Errorf("external data is not read here")
	}
	if len(t.RawData)%4 != 0 {
		return nil, fmt.Errorf("%d raw bytes", len(t.RawData))
	}
	out := make([]float32, len(t.RawData)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.RawData[4*i:]))
	}
	return out, nil
}

// FoldWeights replaces each weight's DequantizeLinear in a QDQ graph (a
// node whose inputs are all initializers: QDQModel's int8 or int16 codes,
// scale and zero point) by its output, a float32 initializer holding
// float32(q - zero_point) * scale, what DequantizeLinear computes. The
// activations keep their QuantizeLinear/DequantizeLinear pairs. ONNX
// Runtime does not fold a DequantizeLinear itself, so a graph as written
// dequantizes every weight at every step; folded, it runs the same graph
// on float weights (on the 1.7B shape's layer graph, 117 against 8.6 ms a
// step), its sums in the order of a prepacked constant weight
// (TestFoldWeightsSameGraph). It returns how many nodes it folded.
func FoldWeights(m *onnxpb.ModelProto) (int, error) {
	g := m.GetGraph()
	inits := map[string]*onnxpb.TensorProto{}
	for _, t := range g.GetInitializer() {
		inits[t.GetName()] = t
	}
	used := map[string]int{}
	for _, n := range g.GetNode() {
		for _, in := range n.GetInput() {
			used[in]++
		}
	}
	var nodes []*onnxpb.NodeProto
	drop := map[string]bool{}
	folded := 0
	for _, n := range g.GetNode() {
		w, ok, err := foldDequantize(n, inits)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", n.GetName(), err)
		}
		if !ok {
			nodes = append(nodes, n)
			continue
		}
		g.Initializer = append(g.Initializer, w)
		for _, in := range n.GetInput() {
			if used[in]--; used[in] == 0 {
				drop[in] = true
			}
		}
		folded++
	}
	g.Node = nodes
	var keep []*onnxpb.TensorProto
	for _, t := range g.Initializer {
		if !drop[t.GetName()] {
			keep = append(keep, t)
		}
	}
	g.Initializer = keep
	return folded, nil
}

// foldDequantize computes a DequantizeLinear of initializers (ok false
// for any other node).
func foldDequantize(n *onnxpb.NodeProto, inits map[string]*onnxpb.TensorProto) (*onnxpb.TensorProto, bool, error) {
	if n.GetOpType() != "DequantizeLinear" || len(n.GetInput()) != 3 {
		return nil, false, nil
	}
	q, s, z := inits[n.Input[0]], inits[n.Input[1]], inits[n.Input[2]]
	if q == nil || s == nil || z == nil {
		return nil, false, nil
	}
	codes, err := intValues(q)
	if err != nil {
		return nil, false, err
	}
	zero, err := intValues(z)
	if err != nil {
		return nil, false, err
	}
	scale, err := tensorFloat32(s)
	if err != nil {
		return nil, false, err
	}
	if len(scale) != len(zero) || len(scale) == 0 {
		return nil, false, fmt.Errorf("%d scales, %d zero points", len(scale), len(zero))
	}
	cols := 1 // per tensor
	if len(scale) > 1 {
		// QDQModel's per-channel weights: the last axis.
		d := q.GetDims()
		if len(d) == 0 || d[len(d)-1] != int64(len(scale)) || len(codes)%len(scale) != 0 {
			return nil, false, fmt.Errorf("%d channel scales for dims %v", len(scale), d)
		}
		for _, a := range n.GetAttribute() {
			if a.GetName() == "axis" && a.GetI() != int64(len(d)-1) && a.GetI() != -1 {
				return nil, false, fmt.Errorf("per-channel axis %d of dims %v (the last axis is folded)", a.GetI(), d)
			}
		}
		cols = len(scale)
	}
	w := make([]float32, len(codes))
	for i, c := range codes {
		k := i % cols
		w[i] = float32(c-zero[k]) * scale[k]
	}
	return floatTensor(n.Output[0], q.GetDims(), w), true, nil
}

// intValues reads an int8, uint8, int16 or uint16 initializer's raw data.
func intValues(t *onnxpb.TensorProto) ([]int32, error) {
	raw := t.GetRawData()
	out := make([]int32, 0, len(raw))
	switch onnxpb.TensorProto_DataType(t.GetDataType()) {
	case onnxpb.TensorProto_INT8:
		for _, b := range raw {
			out = append(out, int32(int8(b)))
		}
	case onnxpb.TensorProto_UINT8:
		for _, b := range raw {
			out = append(out, int32(b))
		}
	case onnxpb.TensorProto_INT16, onnxpb.TensorProto_UINT16:
		if len(raw)%2 != 0 {
			return nil, fmt.Errorf("%s: %d raw bytes of 16-bit values", t.GetName(), len(raw))
		}
		signed := t.GetDataType() == int32(onnxpb.TensorProto_INT16)
		for i := 0; i < len(raw); i += 2 {
			v := binary.LittleEndian.Uint16(raw[i:])
			if signed {
				out = append(out, int32(int16(v)))
			} else {
				out = append(out, int32(v))
			}
		}
	default:
		return nil, fmt.Errorf("%s: element type %d is not folded", t.GetName(), t.GetDataType())
	}
	if n := numel(t.GetDims()); len(out) != n {
		return nil, fmt.Errorf("%s: %d values for dims %v", t.GetName(), len(out), t.GetDims())
	}
	return out, nil
}

func numel(dims []int64) int {
	n := 1
	for _, d := range dims {
		n *= int(d)
	}
	return n
}

// quantizeLPBQ stores an LPBQ weight [k, n] as its decompressed codes
// (q * per-block integer scale, in [-128, 112]) in int8 with the
// per-channel float scales on axis 1, zero point 0: DequantizeLinear then
// computes code * scale in float32, what qnn.BlockScales.Dequantize gives
// (docs/qnn.md#w4a16-lpbq).
func quantizeLPBQ(t *onnxpb.TensorProto, w []float32, e qnn.Encoding, axis int) (q, scale, zp *onnxpb.TensorProto, err error) {
	name := t.GetName()
	if len(t.Dims) != 2 || axis != 1 {
		return nil, nil, nil, fmt.Errorf("parameter %s: LPBQ on dims %v axis %d (a MatMul weight [in, out], axis 1)", name, t.Dims, axis)
	}
	k, n := int(t.Dims[0]), int(t.Dims[1])
	b, err := qnn.BlockScalesOf(e, k, n)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("parameter %s: %w", name, err)
	}
	if len(w) != k*n {
		return nil, nil, nil, fmt.Errorf("parameter %s: %d values for dims %v", name, len(w), t.Dims)
	}
	q = &onnxpb.TensorProto{Name: proto.String(name + "/q"), Dims: t.Dims, DataType: proto.Int32(int32(onnxpb.TensorProto_INT8)), RawData: make([]byte, k*n)}
	for r := range k {
		for j := range n {
			q.RawData[r*n+j] = byte(int8(b.Code(w[r*n+j], j, r/b.Block)))
		}
	}
	zp = &onnxpb.TensorProto{Name: proto.String(name + "/zero_point"), Dims: []int64{int64(n)},
		DataType: proto.Int32(int32(onnxpb.TensorProto_INT8)), RawData: make([]byte, n)}
	return q, floatTensor(name+"/scale", []int64{int64(n)}, e.Scale), zp, nil
}
