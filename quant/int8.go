package quant

import (
	"math"
	"unsafe"
)

// Int8 is one channel's parameters on compressed-tensors' symmetric int8
// grid: w = q * Scale, q in -128..127.
type Int8 struct{ Scale float32 }

// Int8Absmax chooses compressed-tensors' per-channel scale for the values w
// (calculate_qparams, symmetric int8): scale = amax/127.5 computed in
// float32 and rounded to dt, the dtype weight_scale is stored in. A scale
// that is zero after rounding (an all-zero row) becomes torch.finfo(dt).eps,
// as compressed-tensors does; every code of such a row is 0. Non-finite
// inputs give a non-finite scale; the matrix entry points reject them first.
func Int8Absmax(w []float32, dt ScaleDType) Int8 {
	amax := math.Float32frombits(absmaxBits(w))
	return int8FromAmax(amax, dt)
}

func int8FromAmax(amax float32, dt ScaleDType) Int8 {
	s := dt.Round(amax / 127.5)
	if s == 0 {
		s = dt.eps()
	}
	return Int8{Scale: s}
}

// Code returns the int8 code of w: clamp(round(w/Scale), -128, 127) with the
// division in float32 and round half to even, as compressed-tensors'
// quantize kernel computes it (div_rn then rint).
func (p Int8) Code(w float32) int8 {
	return int8(min(max(rint(w/p.Scale), -128), 127))
}

// Value dequantizes a code: float32(q) * Scale.
func (p Int8) Value(q int8) float32 { return float32(float32(q) * p.Scale) }

// Quantize writes the codes of w into dst[:len(w)] and returns the error
// statistics of the dequantized values against w.
func (p Int8) Quantize(dst []int8, w []float32) ErrStats {
	return int8Kernel(dst, w, p.Scale)
}

// Dequantize writes Value(codes[i]) into dst[:len(codes)].
func (p Int8) Dequantize(dst []float32, codes []int8) {
	dst = dst[:len(codes)]
	for i, q := range codes {
		dst[i] = p.Value(q)
	}
}

// Int8Bytes views codes as the bytes of a safetensors I8 tensor (two's
// complement, one byte each) without copying.
func Int8Bytes(codes []int8) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(codes))), len(codes))
}
