package onnxgraph

import "sparkconv/dtype"

// Tensor is a named value fed to or read from a session. Exactly one of
// F32, F16 (IEEE half bits) or I64 holds the data, matching DType.
type Tensor struct {
	DType DType
	Shape []int64
	F32   []float32
	F16   []uint16
	I64   []int64
}

// F32Tensor, F16Tensor and I64Tensor wrap data with a shape.
func F32Tensor(shape []int64, v []float32) Tensor {
	return Tensor{DType: Float32, Shape: shape, F32: v}
}
func I64Tensor(shape []int64, v []int64) Tensor { return Tensor{DType: Int64, Shape: shape, I64: v} }

// F16Tensor rounds v to float16.
func F16Tensor(shape []int64, v []float32) Tensor {
	h := make([]uint16, len(v))
	for i, x := range v {
		h[i] = dtype.F32ToF16(x)
	}
	return Tensor{DType: Float16, Shape: shape, F16: h}
}

// FloatTensor makes a Float32 or Float16 tensor from float32 values.
func FloatTensor(dt DType, shape []int64, v []float32) Tensor {
	if dt == Float16 {
		return F16Tensor(shape, v)
	}
	return F32Tensor(shape, v)
}

// Floats returns the values as float32 (widening float16).
func (t Tensor) Floats() []float32 {
	if t.DType == Float16 {
		out := make([]float32, len(t.F16))
		for i, h := range t.F16 {
			out[i] = dtype.F16ToF32(h)
		}
		return out
	}
	return t.F32
}

func Numel(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}
