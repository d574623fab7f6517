// Package dtype owns the element types of checkpoint tensors and the exact
// conversions between bf16, fp16 and float32.
//
// bf16 -> f32 is exact (a shift). f32 -> bf16 rounds to nearest even and
// quiets NaNs, as PyTorch does. fp16 conversions use github.com/x448/float16,
// which matches the hardware conversion on all 2^32 float32 inputs.
package dtype

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/x448/float16"
)

// DType is a safetensors element type name ("BF16", "F32", ...).
type DType string

// The element types sparkconv reads or writes.
const (
	BOOL DType = "BOOL"
	U8   DType = "U8"
	I8   DType = "I8"
	I16  DType = "I16"
	U16  DType = "U16"
	F16  DType = "F16"
	BF16 DType = "BF16"
	I32  DType = "I32"
	U32  DType = "U32"
	F32  DType = "F32"
	F64  DType = "F64"
	I64  DType = "I64"
	U64  DType = "U64"
)

var sizes = map[DType]int{
	BOOL: 1, U8: 1, I8: 1, I16: 2, U16: 2, F16: 2, BF16: 2,
	I32: 4, U32: 4, F32: 4, F64: 8, I64: 8, U64: 8,
}

// Parse returns the DType named s, or an error for an unknown name.
func Parse(s string) (DType, error) {
	d := DType(s)
	if _, ok := sizes[d]; !ok {
		return "", fmt.Errorf("unknown dtype %q", s)
	}
	return d, nil
}

// Size is the element size in bytes (0 for an unknown type).
func (d DType) Size() int { return sizes[d] }

// IsFloat reports whether d is a floating-point type sparkconv can read as
// float32 (BF16, F16, F32).
func (d DType) IsFloat() bool { return d == BF16 || d == F16 || d == F32 }

// BF16ToF32 converts one bf16 value (as bits) to float32, exactly.
func BF16ToF32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// F32ToBF16 rounds f to the nearest bf16 (ties to even), quieting NaNs.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN: keep sign, force quiet bit
		return uint16(u>>16) | 0x0040
	}
	return uint16((u + 0x7fff + ((u >> 16) & 1)) >> 16)
}

// RoundBF16 returns f rounded to bf16 precision, as a float32.
func RoundBF16(f float32) float32 { return BF16ToF32(F32ToBF16(f)) }

// F16ToF32 converts one IEEE half (as bits) to float32, exactly.
func F16ToF32(h uint16) float32 { return float16.Frombits(h).Float32() }

// F32ToF16 rounds f to the nearest IEEE half (ties to even).
func F32ToF16(f float32) uint16 { return float16.Fromfloat32(f).Bits() }

// RoundF16 returns f rounded to fp16 precision, as a float32.
func RoundF16(f float32) float32 { return F16ToF32(F32ToF16(f)) }

// ToFloat32 decodes little-endian raw bytes of type d into dst, which must
// hold len(raw)/d.Size() elements. Only float types are accepted.
func ToFloat32(dst []float32, raw []byte, d DType) error {
	n := len(raw) / max(d.Size(), 1)
	if len(dst) < n {
		return fmt.Errorf("dtype: destination holds %d values, need %d", len(dst), n)
	}
	switch d {
	case BF16:
		for i := range n {
			dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
		}
	case F16:
		for i := range n {
			dst[i] = F16ToF32(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	case F32:
		for i := range n {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	default:
		return fmt.Errorf("dtype: %s is not a float type", d)
	}
	return nil
}

// FromFloat32 encodes src as little-endian raw bytes of float type d,
// rounding to nearest even.
func FromFloat32(src []float32, d DType) ([]byte, error) {
	out := make([]byte, len(src)*d.Size())
	switch d {
	case BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(out[2*i:], F32ToBF16(v))
		}
	case F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(out[2*i:], F32ToF16(v))
		}
	case F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
	default:
		return nil, fmt.Errorf("dtype: %s is not a float type", d)
	}
	return out, nil
}

// Round returns f rounded to the precision of float type d.
func Round(f float32, d DType) float32 {
	switch d {
	case BF16:
		return RoundBF16(f)
	case F16:
		return RoundF16(f)
	}
	return f
}
