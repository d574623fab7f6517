package qnn

import (
	"fmt"
	"math"
)

// This file is LPBQ, AIMET's low-power blockwise quantization of a MatMul
// weight, in the form the AIMET 1.0.0 encodings write it
// (aimet_onnx/_encoding.py, LPBQEncoding._to_1_0_0; docs/qnn.md#w4a16-lpbq):
//
//	{"enc_type": "LPBQ", "dtype": "INT", "compressed_bw": 4, "bw": 8,
//	 "is_sym": true, "block_size": 64, "scale": [one float per output
//	 channel], "offset": [-128 per output channel],
//	 "per_block_int_scale": [one integer per (output channel, block)]}
//
// A weight w [k, n] (the ONNX MatMul layout: input rows, output columns)
// has k/block_size blocks along the input dimension in each output channel
// j. Block b of channel j has the scale scale[j] * int[j*nb+b], with int in
// [1, 2^(bw-compressed_bw)] (AIMET's grouped_dynamic_quantize clips to
// 1..16), and its codes q in [-8, 7] (signed symmetric 4 bits):
//
//	w[r, j] ≈ (q[r, j] * int[j, r/block_size]) * scale[j]
//
// q * int lies in [-128, 112]: the entry is an 8-bit per-channel grid
// (bw 8, offset -128) whose codes are multiples of their block's integer
// scale. That is how this package dequantizes it, in float32, and how the
// QDQ simulation stores it (int8 codes q*int, DequantizeLinear per channel).

// LPBQ is the enc_type of a low-power blockwise entry.
const LPBQ = "LPBQ"

// LPBQBlock is w4a16-lpbq's block size: qai-hub-models'
// _set_4bit_weights_to_lpbq's block_size.
const LPBQBlock = 64

// BlockScales is a weight's LPBQ grid: per output channel a float scale,
// per (channel, block) an integer one.
type BlockScales struct {
	K, N, Block  int
	CompressedBW int // bits of the codes (4)
	BW           int // bits of the decompressed codes q*int (8)
	Scale        []float32
	Int          []int32 // [n][k/Block], channel-major
}

// Blocks is the number of blocks per output channel.
func (s BlockScales) Blocks() int { return s.K / s.Block }

// BlockScale is block b of channel j's scale, in float64 (exact: a float32
// times an integer of at most 5 bits).
func (s BlockScales) BlockScale(j, b int) float64 {
	return float64(s.Scale[j]) * float64(s.Int[j*s.Blocks()+b])
}

// Code is the decompressed code of weight v in block b of channel j:
// q * int, q = clamp(round half to even(v / block scale), -2^(c-1),
// 2^(c-1)-1), c the compressed bits.
func (s BlockScales) Code(v float32, j, b int) int32 {
	return lpbqCode(v, s.BlockScale(j, b), s.Int[j*s.Blocks()+b], s.CompressedBW)
}

func lpbqCode(v float32, blockScale float64, intScale int32, cbw int) int32 {
	lo, hi := -math.Exp2(float64(cbw-1)), math.Exp2(float64(cbw-1))-1
	q := math.Max(lo, math.Min(hi, math.RoundToEven(float64(v)/blockScale)))
	return int32(q) * intScale
}

// Dequantize returns w's values on the grid: Code * Scale[j] in float32,
// what DequantizeLinear computes from the decompressed codes.
func (s BlockScales) Dequantize(w []float32) []float32 {
	out := make([]float32, len(w))
	for r := range s.K {
		b := r / s.Block
		for j := range s.N {
			out[r*s.N+j] = float32(s.Code(w[r*s.N+j], j, b)) * s.Scale[j]
		}
	}
	return out
}

// Encoding is s as the AIMET 1.0.0 LPBQ entry of the tensor name.
func (s BlockScales) Encoding(name string) Encoding {
	off := -int32(1) << (s.BW - 1)
	e := Encoding{Name: name, DType: "INT", EncType: LPBQ, BW: s.BW, IsSym: true, CompressedBW: s.CompressedBW, BlockSize: s.Block,
		Scale: append([]float32(nil), s.Scale...), PerBlockIntScale: append([]int32(nil), s.Int...)}
	for range s.Scale {
		e.Offset = append(e.Offset, off)
	}
	return e
}

// BlockScalesOf reads an LPBQ entry back for a weight [k, n], checking that
// its shapes fit the weight.
func BlockScalesOf(e Encoding, k, n int) (BlockScales, error) {
	if e.EncType != LPBQ {
		return BlockScales{}, fmt.Errorf("%s: enc_type %s, not LPBQ", e.Name, e.EncType)
	}
	if msg := lpbqShape(e, k, n); msg != "" {
		return BlockScales{}, fmt.Errorf("%s: %s", e.Name, msg)
	}
	return BlockScales{K: k, N: n, Block: e.BlockSize, CompressedBW: e.CompressedBW, BW: e.BW, Scale: e.Scale, Int: e.PerBlockIntScale}, nil
}

// lpbqShape says what is wrong with an LPBQ entry's shapes for a weight
// [k, n], or "".
func lpbqShape(e Encoding, k, n int) string {
	switch {
	case e.BlockSize <= 0 || k%e.BlockSize != 0:
		return fmt.Sprintf("block_size %d does not divide the weight's %d input rows", e.BlockSize, k)
	case len(e.Scale) != n:
		return fmt.Sprintf("%d channel scales for a weight of %d output channels", len(e.Scale), n)
	case len(e.PerBlockIntScale) != n*(k/e.BlockSize):
		return fmt.Sprintf("%d per_block_int_scale entries, want %d (%d channels x %d blocks of %d)", len(e.PerBlockIntScale), n*(k/e.BlockSize), n, k/e.BlockSize, e.BlockSize)
	}
	return ""
}

// lpbqProblems lists what is wrong in an LPBQ entry by itself (its shapes
// against the weight are lpbqShape's): it is for parameters, symmetric,
// 4 compressed bits under 8, a positive block size, and integer scales in
// [1, 2^(bw-compressed_bw)].
func (e Encoding) lpbqProblems(param bool) []string {
	var p []string
	if !param {
		p = append(p, "LPBQ on an activation (block grids are for weights)")
	}
	if !e.IsSym {
		p = append(p, "LPBQ must be symmetric (is_sym true)")
	}
	if e.CompressedBW != 4 || e.BW != 8 {
		p = append(p, fmt.Sprintf("LPBQ with compressed_bw %d and bw %d (HTP's is 4 under 8)", e.CompressedBW, e.BW))
	}
	if e.BlockSize <= 0 {
		p = append(p, fmt.Sprintf("LPBQ block_size %d", e.BlockSize))
	}
	if e.CompressedBW > 0 && e.BW > e.CompressedBW && e.BW-e.CompressedBW < 31 {
		top := int32(1) << (e.BW - e.CompressedBW)
		for i, v := range e.PerBlockIntScale {
			if v < 1 || v > top {
				p = append(p, fmt.Sprintf("per_block_int_scale[%d] = %d outside [1, %d]", i, v, top))
				break
			}
		}
	}
	if len(e.Scale) > 0 && (len(e.PerBlockIntScale) == 0 || len(e.PerBlockIntScale)%len(e.Scale) != 0) {
		p = append(p, fmt.Sprintf("%d per_block_int_scale entries for %d channel scales (want a whole number of blocks per channel)", len(e.PerBlockIntScale), len(e.Scale)))
	}
	return p
}
