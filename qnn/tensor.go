package qnn

import (
	"encoding/binary"
	"math"

	"sparkconv/onnxpb"

	"github.com/x448/float16"
)

// maxDecode bounds the constants the lint decodes: patterns only need
// scalars, axes and shapes, and a fuzzed model may claim any size.
const maxDecode = 1 << 16

// numel is the element count of dims, or -1 when a dim is negative or the
// product passes limit.
func numel(dims []int64, limit int64) int64 {
	n := int64(1)
	for _, d := range dims {
		if d < 0 {
			return -1
		}
		if d != 0 && n > limit/d {
			return -1
		}
		n *= d
	}
	return n
}

// elemSize is the byte width of a fixed-width ONNX element type (0 for
// types the lint does not decode).
func elemSize(dt int32) int {
	switch onnxpb.TensorProto_DataType(dt) {
	case onnxpb.TensorProto_BOOL, onnxpb.TensorProto_INT8, onnxpb.TensorProto_UINT8:
		return 1
	case onnxpb.TensorProto_INT16, onnxpb.TensorProto_UINT16, onnxpb.TensorProto_FLOAT16, onnxpb.TensorProto_BFLOAT16:
		return 2
	case onnxpb.TensorProto_INT32, onnxpb.TensorProto_UINT32, onnxpb.TensorProto_FLOAT:
		return 4
	case onnxpb.TensorProto_INT64, onnxpb.TensorProto_UINT64, onnxpb.TensorProto_DOUBLE:
		return 8
	}
	return 0
}

// isExternal reports whether t keeps its bytes in an external file.
func isExternal(t *onnxpb.TensorProto) bool {
	return t.GetDataLocation() == onnxpb.TensorProto_EXTERNAL || len(t.GetExternalData()) > 0
}

// tensorFloats decodes a small numeric tensor as float64 values. ok is
// false for external, oversized, malformed or non-numeric tensors.
func tensorFloats(t *onnxpb.TensorProto) ([]float64, bool) {
	if t == nil || isExternal(t) {
		return nil, false
	}
	n := numel(t.GetDims(), maxDecode)
	if n < 0 {
		return nil, false
	}
	dt := t.GetDataType()
	if raw := t.GetRawData(); len(raw) > 0 || n == 0 {
		return rawFloats(raw, dt, int(n))
	}
	out := make([]float64, 0, n)
	switch onnxpb.TensorProto_DataType(dt) {
	case onnxpb.TensorProto_FLOAT:
		for _, v := range t.GetFloatData() {
			out = append(out, float64(v))
		}
	case onnxpb.TensorProto_DOUBLE:
		out = append(out, t.GetDoubleData()...)
	case onnxpb.TensorProto_INT64:
		for _, v := range t.GetInt64Data() {
			out = append(out, float64(v))
		}
	case onnxpb.TensorProto_UINT32, onnxpb.TensorProto_UINT64:
		for _, v := range t.GetUint64Data() {
			out = append(out, float64(v))
		}
	case onnxpb.TensorProto_FLOAT16:
		for _, v := range t.GetInt32Data() {
			out = append(out, float64(float16.Frombits(uint16(v)).Float32()))
		}
	case onnxpb.TensorProto_BFLOAT16:
		for _, v := range t.GetInt32Data() {
			out = append(out, float64(math.Float32frombits(uint32(uint16(v))<<16)))
		}
	case onnxpb.TensorProto_INT32, onnxpb.TensorProto_INT16, onnxpb.TensorProto_INT8,
		onnxpb.TensorProto_UINT16, onnxpb.TensorProto_UINT8, onnxpb.TensorProto_BOOL:
		for _, v := range t.GetInt32Data() {
			out = append(out, float64(v))
		}
	default:
		return nil, false
	}
	if int64(len(out)) != n {
		return nil, false
	}
	return out, true
}

// rawFloats decodes little-endian raw_data of n elements.
func rawFloats(raw []byte, dt int32, n int) ([]float64, bool) {
	size := elemSize(dt)
	if size == 0 || len(raw) != n*size {
		return nil, false
	}
	out := make([]float64, n)
	for i := range out {
		b := raw[i*size : (i+1)*size]
		switch onnxpb.TensorProto_DataType(dt) {
		case onnxpb.TensorProto_FLOAT:
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
		case onnxpb.TensorProto_DOUBLE:
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b))
		case onnxpb.TensorProto_FLOAT16:
			out[i] = float64(float16.Frombits(binary.LittleEndian.Uint16(b)).Float32())
		case onnxpb.TensorProto_BFLOAT16:
			out[i] = float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
		case onnxpb.TensorProto_INT64:
			out[i] = float64(int64(binary.LittleEndian.Uint64(b)))
		case onnxpb.TensorProto_UINT64:
			out[i] = float64(binary.LittleEndian.Uint64(b))
		case onnxpb.TensorProto_INT32:
			out[i] = float64(int32(binary.LittleEndian.Uint32(b)))
		case onnxpb.TensorProto_UINT32:
			out[i] = float64(binary.LittleEndian.Uint32(b))
		case onnxpb.TensorProto_INT16:
			out[i] = float64(int16(binary.LittleEndian.Uint16(b)))
		case onnxpb.TensorProto_UINT16:
			out[i] = float64(binary.LittleEndian.Uint16(b))
		case onnxpb.TensorProto_INT8:
			out[i] = float64(int8(b[0]))
		default: // UINT8, BOOL
			out[i] = float64(b[0])
		}
	}
	return out, true
}

// tensorInts decodes a small integer tensor (INT64 or INT32) exactly.
func tensorInts(t *onnxpb.TensorProto) ([]int64, bool) {
	if t == nil || isExternal(t) {
		return nil, false
	}
	n := numel(t.GetDims(), maxDecode)
	if n < 0 {
		return nil, false
	}
	var out []int64
	switch onnxpb.TensorProto_DataType(t.GetDataType()) {
	case onnxpb.TensorProto_INT64:
		if raw := t.GetRawData(); len(raw) > 0 || n == 0 {
			if int64(len(raw)) != 8*n {
				return nil, false
			}
			out = make([]int64, n)
			for i := range out {
				out[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
			}
		} else {
			out = append([]int64(nil), t.GetInt64Data()...)
		}
	case onnxpb.TensorProto_INT32:
		if raw := t.GetRawData(); len(raw) > 0 || n == 0 {
			if int64(len(raw)) != 4*n {
				return nil, false
			}
			out = make([]int64, n)
			for i := range out {
				out[i] = int64(int32(binary.LittleEndian.Uint32(raw[4*i:])))
			}
		} else {
			for _, v := range t.GetInt32Data() {
				out = append(out, int64(v))
			}
		}
	default:
		return nil, false
	}
	if int64(len(out)) != n {
		return nil, false
	}
	if out == nil {
		out = []int64{}
	}
	return out, true
}

// constantTensor converts a Constant node's value attribute to a tensor
// (value, value_float(s), value_int(s)); nil for other forms.
func constantTensor(n *onnxpb.NodeProto) *onnxpb.TensorProto {
	for _, a := range n.GetAttribute() {
		switch a.GetName() {
		case "value":
			return a.GetT()
		case "value_float":
			return &onnxpb.TensorProto{DataType: i32(int32(onnxpb.TensorProto_FLOAT)), FloatData: []float32{a.GetF()}, Dims: []int64{}}
		case "value_floats":
			return &onnxpb.TensorProto{DataType: i32(int32(onnxpb.TensorProto_FLOAT)), FloatData: a.GetFloats(), Dims: []int64{int64(len(a.GetFloats()))}}
		case "value_int":
			return &onnxpb.TensorProto{DataType: i32(int32(onnxpb.TensorProto_INT64)), Int64Data: []int64{a.GetI()}, Dims: []int64{}}
		case "value_ints":
			return &onnxpb.TensorProto{DataType: i32(int32(onnxpb.TensorProto_INT64)), Int64Data: a.GetInts(), Dims: []int64{int64(len(a.GetInts()))}}
		}
	}
	return nil
}

func i32(v int32) *int32 { return &v }
