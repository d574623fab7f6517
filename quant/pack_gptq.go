package quant

import (
	"encoding/binary"
	"fmt"
)

// GPTQ v1 (checkpoint_format "gptq", bits 4) tensors of one linear W[N, K]
// with group size g, all little-endian as safetensors stores them
// (docs/formats.md#gptq-tensors-and-packing):
//
//	qweight int32 [K/8, N]   nibble j of word [r, n] = code of (k = 8r+j, n)
//	qzeros  int32 [K/g, N/8] nibble j of word [G, c] = zero(G, 8c+j) - 1
//	scales  fp16  [K/g, N]   scales[G, n] = scale of group G of row n
//	g_idx   int32 [K]        k / g
//
// Codes come in as this package produces them: [N*K] row-major, one code
// 0..15 per byte (Int4Result.Codes).

// nibbles8 packs 8 codes held in the bytes of a little-endian uint64 (byte
// j = code j, low 4 bits used) into 32 bits, code j at bits 4j..4j+3.
func nibbles8(u uint64) uint32 {
	u &= 0x0F0F0F0F0F0F0F0F
	u = (u | u>>4) & 0x00FF00FF00FF00FF
	u = (u | u>>8) & 0x0000FFFF0000FFFF
	return uint32(u | u>>16)
}

// spread8 is the inverse of nibbles8: code j of x goes to byte j.
func spread8(x uint32) uint64 {
	u := uint64(x)
	u = (u | u<<16) & 0x0000FFFF0000FFFF
	u = (u | u<<8) & 0x00FF00FF00FF00FF
	u = (u | u<<4) & 0x0F0F0F0F0F0F0F0F
	return u
}

func checkCodes(what string, codes []uint8, n, k, kMult, nMult int) error {
	if n <= 0 || k <= 0 || k%kMult != 0 || n%nMult != 0 {
		return fmt.Errorf("quant: %s needs N > 0 divisible by %d and K > 0 divisible by %d, got N=%d K=%d",
			what, nMult, kMult, n, k)
	}
	if len(codes) != n*k {
		return fmt.Errorf("quant: %s of [%d, %d] needs %d codes, got %d", what, n, k, n*k, len(codes))
	}
	return nil
}

func checkLen(what string, b []byte, want int) error {
	if len(b) != want {
		return fmt.Errorf("quant: %s needs %d bytes, got %d", what, want, len(b))
	}
	return nil
}

// gptqTile is the number of output columns n packed together, so the
// transposed reads stay in cache while the writes run contiguously.
const gptqTile = 64

// PackGPTQQWeight writes the qweight int32 [K/8, N] bytes of codes [N, K]
// into dst (K/8*N*4 = N*K/2 bytes). K must be a multiple of 8.
func PackGPTQQWeight(dst []byte, codes []uint8, n, k int) error {
	if err := checkCodes("GPTQ qweight", codes, n, k, 8, 1); err != nil {
		return err
	}
	if err := checkLen("GPTQ qweight", dst, k/8*n*4); err != nil {
		return err
	}
	for n0 := 0; n0 < n; n0 += gptqTile {
		n1 := min(n, n0+gptqTile)
		for r := 0; r < k/8; r++ {
			out := dst[(r*n+n0)*4 : (r*n+n1)*4]
			for j := n0; j < n1; j++ {
				u := binary.LittleEndian.Uint64(codes[j*k+8*r:])
				binary.LittleEndian.PutUint32(out[(j-n0)*4:], nibbles8(u))
			}
		}
	}
	return nil
}

// UnpackGPTQQWeight reads qweight int32 [K/8, N] bytes back into codes
// [N, K] (dst, len N*K).
func UnpackGPTQQWeight(dst []uint8, qweight []byte, n, k int) error {
	if err := checkCodes("GPTQ qweight", dst, n, k, 8, 1); err != nil {
		return err
	}
	if err := checkLen("GPTQ qweight", qweight, k/8*n*4); err != nil {
		return err
	}
	for n0 := 0; n0 < n; n0 += gptqTile {
		n1 := min(n, n0+gptqTile)
		for r := 0; r < k/8; r++ {
			in := qweight[(r*n+n0)*4 : (r*n+n1)*4]
			for j := n0; j < n1; j++ {
				x := binary.LittleEndian.Uint32(in[(j-n0)*4:])
				binary.LittleEndian.PutUint64(dst[j*k+8*r:], spread8(x))
			}
		}
	}
	return nil
}

// PackGPTQQZeros writes qzeros int32 [groups, N/8] in the v1 convention:
// nibble j of word [G, c] holds zeros[G*N + 8c+j] - 1 (zeros is [groups, N],
// true zero points 1..16). For sym=true every zero is 8 and every word is
// 0x77777777; GPTQSymQZeros writes that directly.
func PackGPTQQZeros(dst []byte, zeros []uint8, groups, n int) error {
	if groups <= 0 || n <= 0 || n%8 != 0 || len(zeros) != groups*n {
		return fmt.Errorf("quant: GPTQ qzeros needs [groups, N] zeros with N%%8 == 0, got groups=%d N=%d len=%d",
			groups, n, len(zeros))
	}
	if err := checkLen("GPTQ qzeros", dst, groups*n/8*4); err != nil {
		return err
	}
	for i := 0; i < len(zeros); i += 8 {
		var u uint64
		for j := 7; j >= 0; j-- {
			z := zeros[i+j]
			if z < 1 || z > 16 {
				return fmt.Errorf("quant: GPTQ v1 zero point %d at [%d, %d] is outside 1..16", z, i/n, i%n+j)
			}
			u = u<<8 | uint64(z-1)
		}
		binary.LittleEndian.PutUint32(dst[i/2:], nibbles8(u))
	}
	return nil
}

// UnpackGPTQQZeros reads v1 qzeros int32 [groups, N/8] back into true zero
// points [groups, N] (stored nibble + 1).
func UnpackGPTQQZeros(dst []uint8, qzeros []byte, groups, n int) error {
	if groups <= 0 || n <= 0 || n%8 != 0 || len(dst) != groups*n {
		return fmt.Errorf("quant: GPTQ qzeros needs [groups, N] zeros with N%%8 == 0, got groups=%d N=%d len=%d",
			groups, n, len(dst))
	}
	if err := checkLen("GPTQ qzeros", qzeros, groups*n/8*4); err != nil {
		return err
	}
	for i := 0; i < len(dst); i += 8 {
		u := spread8(binary.LittleEndian.Uint32(qzeros[i/2:])) + 0x0101010101010101
		binary.LittleEndian.PutUint64(dst[i:], u)
	}
	return nil
}

// GPTQSymQZeros fills dst (groups*N/8 int32 words) with 0x77777777, the v1
// qzeros of a symmetric 4-bit checkpoint (zero point 8 stored as 7).
func GPTQSymQZeros(dst []byte, groups, n int) error {
	if groups <= 0 || n <= 0 || n%8 != 0 {
		return fmt.Errorf("quant: GPTQ qzeros needs groups > 0 and N%%8 == 0, got groups=%d N=%d", groups, n)
	}
	if err := checkLen("GPTQ qzeros", dst, groups*n/8*4); err != nil {
		return err
	}
	for i := 0; i < len(dst); i += 4 {
		binary.LittleEndian.PutUint32(dst[i:], 0x77777777)
	}
	return nil
}

// PackGPTQScales writes scales fp16 [groups, N] from per-row group scales
// [N, groups] (Int4Result.Scales, already rounded to fp16): the transpose.
func PackGPTQScales(dst []byte, scales []float32, n, groups int) error {
	return packTransposed("GPTQ scales", dst, scales, n, groups, ScaleF16)
}

// UnpackGPTQScales reads scales fp16 [groups, N] back into [N, groups].
func UnpackGPTQScales(dst []float32, src []byte, n, groups int) error {
	return unpackTransposed("GPTQ scales", dst, src, n, groups, ScaleF16)
}

// PutGPTQGIdx writes g_idx int32 [K] = k / g (no act-order).
func PutGPTQGIdx(dst []byte, k, g int) error {
	if g <= 0 || k <= 0 || k%g != 0 {
		return fmt.Errorf("quant: GPTQ g_idx needs group size %d dividing K=%d", g, k)
	}
	if err := checkLen("GPTQ g_idx", dst, 4*k); err != nil {
		return err
	}
	for i := 0; i < k; i++ {
		binary.LittleEndian.PutUint32(dst[4*i:], uint32(i/g))
	}
	return nil
}

// packTransposed writes vals [N, groups] as dt values laid out [groups, N].
func packTransposed(what string, dst []byte, vals []float32, n, groups int, dt ScaleDType) error {
	if n <= 0 || groups <= 0 || len(vals) != n*groups {
		return fmt.Errorf("quant: %s needs [%d, %d] = %d values, got %d", what, n, groups, n*groups, len(vals))
	}
	sz := dt.Size()
	if err := checkLen(what, dst, n*groups*sz); err != nil {
		return err
	}
	for g := 0; g < groups; g++ {
		for j := 0; j < n; j++ {
			dt.PutParams(dst[(g*n+j)*sz:(g*n+j+1)*sz], vals[j*groups+g:j*groups+g+1])
		}
	}
	return nil
}

func unpackTransposed(what string, dst []float32, src []byte, n, groups int, dt ScaleDType) error {
	if n <= 0 || groups <= 0 || len(dst) != n*groups {
		return fmt.Errorf("quant: %s needs [%d, %d] = %d values, got %d", what, n, groups, n*groups, len(dst))
	}
	if err := checkLen(what, src, n*groups*dt.Size()); err != nil {
		return err
	}
	for g := 0; g < groups; g++ {
		for j := 0; j < n; j++ {
			dst[j*groups+g] = dt.Param(src, g*n+j)
		}
	}
	return nil
}
