package quant

import (
	"encoding/binary"
	"fmt"
	"math"

	"sparkconv/dtype"
)

// ScaleDType is the dtype a quantization parameter (scale, zero) is stored
// in. Parameters are rounded to it before codes are chosen.
type ScaleDType uint8

const (
	// ScaleF32 stores parameters as IEEE float32 (no rounding).
	ScaleF32 ScaleDType = iota
	// ScaleBF16 stores parameters as bfloat16 (round to nearest even).
	ScaleBF16
	// ScaleF16 stores parameters as IEEE float16 (round to nearest even).
	ScaleF16
)

// String names the dtype as safetensors does ("F32", "BF16", "F16").
func (d ScaleDType) String() string {
	switch d {
	case ScaleF32:
		return "F32"
	case ScaleBF16:
		return "BF16"
	case ScaleF16:
		return "F16"
	}
	return fmt.Sprintf("ScaleDType(%d)", uint8(d))
}

// Size is the number of bytes of one stored value.
func (d ScaleDType) Size() int {
	if d == ScaleF32 {
		return 4
	}
	return 2
}

// Round returns x rounded to the nearest value representable in d (ties to
// even), as a float32. NaN stays NaN; values beyond the range become ±Inf.
func (d ScaleDType) Round(x float32) float32 {
	switch d {
	case ScaleBF16:
		return bf16ToF32(f32ToBF16(x))
	case ScaleF16:
		return dtype.RoundF16(x)
	}
	return x
}

// eps is torch.finfo(d).eps, the scale compressed-tensors substitutes for
// a scale that is zero after rounding.
func (d ScaleDType) eps() float32 {
	switch d {
	case ScaleBF16:
		return 0x1p-7
	case ScaleF16:
		return 0x1p-10
	}
	return 0x1p-23
}

// minScale is the smallest scale the 4-bit grids use: the smallest positive
// normal of d (fp16: its smallest subnormal, exact in fp32 and bf16, since
// the fp16 normal minimum 2^-14 would coarsen real groups).
func (d ScaleDType) minScale() float32 {
	if d == ScaleF16 {
		return 0x1p-24
	}
	return 0x1p-126
}

// f32ToBF16 and bf16ToF32 are dtype's conversions (round to nearest even,
// NaN quieted; exact widening), wrapped short so they inline in hot loops.
func f32ToBF16(x float32) uint16 { return dtype.F32ToBF16(x) }
func bf16ToF32(b uint16) float32 { return dtype.BF16ToF32(b) }

// PutParams writes vals (already rounded to d) as little-endian d values into
// dst, which must hold len(vals)*d.Size() bytes.
func (d ScaleDType) PutParams(dst []byte, vals []float32) {
	switch d {
	case ScaleBF16:
		for i, v := range vals {
			binary.LittleEndian.PutUint16(dst[2*i:], f32ToBF16(v))
		}
	case ScaleF16:
		for i, v := range vals {
			binary.LittleEndian.PutUint16(dst[2*i:], dtype.F32ToF16(v))
		}
	default:
		for i, v := range vals {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	}
}

// Param decodes the i-th little-endian d value of src.
func (d ScaleDType) Param(src []byte, i int) float32 {
	switch d {
	case ScaleBF16:
		return bf16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	case ScaleF16:
		return dtype.F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
}

func (d ScaleDType) valid() error {
	if d > ScaleF16 {
		return fmt.Errorf("quant: unknown scale dtype %d", uint8(d))
	}
	return nil
}

// maxFinite is the largest finite value of d.
func (d ScaleDType) maxFinite() float32 {
	switch d {
	case ScaleBF16:
		return math.Float32frombits(0x7f7f0000)
	case ScaleF16:
		return 65504
	}
	return math.MaxFloat32
}
