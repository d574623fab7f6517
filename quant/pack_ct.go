package quant

import (
	"encoding/binary"
	"fmt"
)

// compressed-tensors' pack-quantized layout for 4-bit weights
// (compressors/pack_quantized/helpers.py pack_to_int32): eight 4-bit
// values to an int32, value j of a word in bits 4j..4j+3, each value
// stored as its unsigned code (the signed int4 plus 8). weight_packed
// [N, K/8] packs along K; weight_zero_point [N/8, groups] packs along N.

// PackCTWeight writes weight_packed int32 [N, K/8] from codes [N, K]
// (0..15, row-major).
func PackCTWeight(dst []byte, codes []uint8, n, k int) error {
	if n <= 0 || k <= 0 || k%8 != 0 || len(codes) != n*k {
		return fmt.Errorf("quant: weight_packed needs K a multiple of 8 and %d x %d codes, got K=%d and %d", n, k, k, len(codes))
	}
	if err := checkLen("weight_packed", dst, n*k/2); err != nil {
		return err
	}
	for w := range n * k / 8 {
		binary.LittleEndian.PutUint32(dst[4*w:], word(codes[8*w:8*w+8]))
	}
	return nil
}

// UnpackCTWeight reads weight_packed [N, K/8] back into codes [N, K].
func UnpackCTWeight(dst []uint8, packed []byte, n, k int) error {
	if n <= 0 || k <= 0 || k%8 != 0 || len(dst) != n*k {
		return fmt.Errorf("quant: weight_packed needs K a multiple of 8 and %d x %d codes, got K=%d and %d", n, k, k, len(dst))
	}
	if err := checkLen("weight_packed", packed, n*k/2); err != nil {
		return err
	}
	for w := range n * k / 8 {
		unword(dst[8*w:8*w+8], binary.LittleEndian.Uint32(packed[4*w:]))
	}
	return nil
}

// PackCTZeros writes weight_zero_point int32 [N/8, groups] from zero
// points zeros [N, groups] (0..15), packed along N.
func PackCTZeros(dst []byte, zeros []uint8, n, groups int) error {
	if n <= 0 || groups <= 0 || n%8 != 0 || len(zeros) != n*groups {
		return fmt.Errorf("quant: weight_zero_point needs N a multiple of 8 and %d x %d zero points, got N=%d and %d", n, groups, n, len(zeros))
	}
	if err := checkLen("weight_zero_point", dst, n*groups/2); err != nil {
		return err
	}
	var col [8]uint8
	for r := range n / 8 {
		for g := range groups {
			for j := range col {
				col[j] = zeros[(8*r+j)*groups+g]
			}
			binary.LittleEndian.PutUint32(dst[4*(r*groups+g):], word(col[:]))
		}
	}
	return nil
}

// UnpackCTZeros reads weight_zero_point [N/8, groups] back into zero
// points [N, groups].
func UnpackCTZeros(dst []uint8, packed []byte, n, groups int) error {
	if n <= 0 || groups <= 0 || n%8 != 0 || len(dst) != n*groups {
		return fmt.Errorf("quant: weight_zero_point needs N a multiple of 8 and %d x %d zero points, got N=%d and %d", n, groups, n, len(dst))
	}
	if err := checkLen("weight_zero_point", packed, n*groups/2); err != nil {
		return err
	}
	var col [8]uint8
	for r := range n / 8 {
		for g := range groups {
			unword(col[:], binary.LittleEndian.Uint32(packed[4*(r*groups+g):]))
			for j, z := range col {
				dst[(8*r+j)*groups+g] = z
			}
		}
	}
	return nil
}

// word packs eight 4-bit values, value j in bits 4j..4j+3.
func word(v []uint8) uint32 {
	var u uint32
	for j, x := range v[:8] {
		u |= uint32(x&15) << (4 * j)
	}
	return u
}

// unword is word's inverse.
func unword(dst []uint8, u uint32) {
	for j := range dst[:8] {
		dst[j] = uint8(u>>(4*j)) & 15
	}
}
