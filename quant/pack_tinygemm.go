package quant

import (
	"encoding/binary"
	"fmt"

	"sparkconv/kernels"
)

// Tinygemm (torch _weight_int4pack_mm_for_cpu) layouts of codes [N, K],
// docs/formats.md#tinygemm-layout.
//
// The portable layout (sparkconv's "cpu_int4" qweight) is uint8 [N, K/2]:
// byte j of row n holds k = 2j in its low nibble and k = 2j+1 in its high
// nibble. A loader expands it to the int32 [N, K] that
// _convert_weight_to_int4pack_for_cpu takes.
//
// The kernel layouts are what _convert_weight_to_int4pack_for_cpu itself
// produces (weight_to_int4pack_kernel), blocks of BLOCK_N channels stored
// one after another as [K][BLOCK_N/2] bytes:
//
//	AVX-512 (BLOCK_N 64): byte d (0..31) of row k = channel d (low nibble)
//	                      | channel d+32 (high nibble)
//	AVX2    (BLOCK_N 32): byte d (0..15) = channel d | channel d+16
//
// A last block narrower than BLOCK_N (N%64 in {16, 32, 48} on AVX-512, 16
// on AVX2) uses adjacent channel pairs: byte d = channel 2d | channel 2d+1.
// Both need N % 16 == 0 and K even.

// KernelLayout names an ISA-specific pre-packed tinygemm layout.
type KernelLayout uint8

const (
	// LayoutAVX512 is the layout of torch builds dispatched for AVX-512.
	LayoutAVX512 KernelLayout = iota
	// LayoutAVX2 is the layout of torch builds dispatched for AVX2.
	LayoutAVX2
)

// String returns "avx512" or "avx2", the --pack flag values.
func (l KernelLayout) String() string {
	switch l {
	case LayoutAVX512:
		return "avx512"
	case LayoutAVX2:
		return "avx2"
	}
	return fmt.Sprintf("KernelLayout(%d)", uint8(l))
}

func (l KernelLayout) blockN() (int, error) {
	switch l {
	case LayoutAVX512:
		return 64, nil
	case LayoutAVX2:
		return 32, nil
	}
	return 0, fmt.Errorf("quant: unknown tinygemm kernel layout %d", uint8(l))
}

// PackTinygemm writes the portable uint8 [N, K/2] bytes of codes [N, K]
// into dst (N*K/2 bytes), rows spread over the cores. K must be even.
func PackTinygemm(dst []byte, codes []uint8, n, k int) error {
	if err := checkCodes("tinygemm qweight", codes, n, k, 2, 1); err != nil {
		return err
	}
	if err := checkLen("tinygemm qweight", dst, n*k/2); err != nil {
		return err
	}
	kernels.Parallel(n, func(lo, hi int) { packNibbles(dst[lo*k/2:hi*k/2], codes[lo*k:hi*k]) })
	return nil
}

// packNibbles packs the even number of codes into dst, two a byte.
func packNibbles(dst []byte, codes []uint8) {
	i := 0
	for ; i+8 <= len(codes); i += 8 {
		binary.LittleEndian.PutUint32(dst[i/2:], nibbles8(binary.LittleEndian.Uint64(codes[i:])))
	}
	for ; i < len(codes); i += 2 {
		dst[i/2] = codes[i]&15 | codes[i+1]<<4
	}
}

// UnpackTinygemm reads portable uint8 [N, K/2] bytes back into codes [N, K].
func UnpackTinygemm(dst []uint8, packed []byte, n, k int) error {
	if err := checkCodes("tinygemm qweight", dst, n, k, 2, 1); err != nil {
		return err
	}
	if err := checkLen("tinygemm qweight", packed, n*k/2); err != nil {
		return err
	}
	i := 0
	for ; i+8 <= len(dst); i += 8 {
		binary.LittleEndian.PutUint64(dst[i:], spread8(binary.LittleEndian.Uint32(packed[i/2:])))
	}
	for ; i < len(dst); i += 2 {
		b := packed[i/2]
		dst[i], dst[i+1] = b&15, b>>4
	}
	return nil
}

// PackTinygemmKernel writes codes [N, K] in the pre-packed layout of
// _convert_weight_to_int4pack_for_cpu for layout (N*K/2 bytes).
func PackTinygemmKernel(dst []byte, codes []uint8, n, k int, layout KernelLayout) error {
	bn, err := layout.blockN()
	if err != nil {
		return err
	}
	if err := checkCodes("tinygemm "+layout.String()+" qweight", codes, n, k, 2, 16); err != nil {
		return err
	}
	if err := checkLen("tinygemm "+layout.String()+" qweight", dst, n*k/2); err != nil {
		return err
	}
	for n0 := 0; n0 < n; n0 += bn {
		nb := min(bn, n-n0)
		blk := dst[n0*k/2 : (n0+nb)*k/2]
		if nb == bn {
			packHalves(blk, codes[n0*k:], k, bn/2)
		} else {
			packPairs(blk, codes[n0*k:], k, nb)
		}
	}
	return nil
}

// packHalves fills one full block: byte [k][d] = channel d | channel d+h<<4
// for d < h = BLOCK_N/2. Channels are read 8 k at a time.
func packHalves(blk []byte, codes []uint8, k, h int) {
	k8 := k &^ 7
	for d := 0; d < h; d++ {
		lo := codes[d*k : (d+1)*k]
		hi := codes[(d+h)*k : (d+h+1)*k]
		kk := 0
		for ; kk < k8; kk += 8 {
			u := binary.LittleEndian.Uint64(lo[kk:])&0x0F0F0F0F0F0F0F0F |
				(binary.LittleEndian.Uint64(hi[kk:])&0x0F0F0F0F0F0F0F0F)<<4
			for j := 0; j < 8; j++ {
				blk[(kk+j)*h+d] = byte(u >> (8 * j))
			}
		}
		for ; kk < k; kk++ {
			blk[kk*h+d] = lo[kk]&15 | hi[kk]<<4
		}
	}
}

// packPairs fills a tail block of nb channels: byte [k][d] = channel 2d |
// channel 2d+1 << 4, for d < nb/2.
func packPairs(blk []byte, codes []uint8, k, nb int) {
	h := nb / 2
	for d := 0; d < h; d++ {
		lo := codes[2*d*k : (2*d+1)*k]
		hi := codes[(2*d+1)*k : (2*d+2)*k]
		for kk := 0; kk < k; kk++ {
			blk[kk*h+d] = lo[kk]&15 | hi[kk]<<4
		}
	}
}

// UnpackTinygemmKernel reads a pre-packed kernel layout back into codes
// [N, K].
func UnpackTinygemmKernel(dst []uint8, packed []byte, n, k int, layout KernelLayout) error {
	bn, err := layout.blockN()
	if err != nil {
		return err
	}
	if err := checkCodes("tinygemm "+layout.String()+" qweight", dst, n, k, 2, 16); err != nil {
		return err
	}
	if err := checkLen("tinygemm "+layout.String()+" qweight", packed, n*k/2); err != nil {
		return err
	}
	for n0 := 0; n0 < n; n0 += bn {
		nb := min(bn, n-n0)
		blk := packed[n0*k/2 : (n0+nb)*k/2]
		h := nb / 2
		for d := 0; d < h; d++ {
			// channels of byte d: (d, d+h) in a full block, (2d, 2d+1) in a tail.
			c0, c1 := n0+d, n0+d+h
			if nb != bn {
				c0, c1 = n0+2*d, n0+2*d+1
			}
			for kk := 0; kk < k; kk++ {
				b := blk[kk*h+d]
				dst[c0*k+kk], dst[c1*k+kk] = b&15, b>>4
			}
		}
	}
	return nil
}

// PackTinygemmScalesZeros writes scales_and_zeros [groups, N, 2] (scale,
// zero) as dt values from per-row group parameters scales, zeros [N, groups]
// (Int4Result.Scales/Zeros, already rounded to dt, the activation dtype).
func PackTinygemmScalesZeros(dst []byte, scales, zeros []float32, n, groups int, dt ScaleDType) error {
	if n <= 0 || groups <= 0 || len(scales) != n*groups || len(zeros) != n*groups {
		return fmt.Errorf("quant: tinygemm scales_and_zeros needs [%d, %d] scales and zeros, got %d and %d",
			n, groups, len(scales), len(zeros))
	}
	if err := dt.valid(); err != nil {
		return err
	}
	sz := dt.Size()
	if err := checkLen("tinygemm scales_and_zeros", dst, groups*n*2*sz); err != nil {
		return err
	}
	var pair [2]float32
	for g := 0; g < groups; g++ {
		for j := 0; j < n; j++ {
			pair[0], pair[1] = scales[j*groups+g], zeros[j*groups+g]
			o := (g*n + j) * 2 * sz
			dt.PutParams(dst[o:o+2*sz], pair[:])
		}
	}
	return nil
}

// UnpackTinygemmScalesZeros reads scales_and_zeros [groups, N, 2] back into
// scales and zeros [N, groups].
func UnpackTinygemmScalesZeros(scales, zeros []float32, src []byte, n, groups int, dt ScaleDType) error {
	if n <= 0 || groups <= 0 || len(scales) != n*groups || len(zeros) != n*groups {
		return fmt.Errorf("quant: tinygemm scales_and_zeros needs [%d, %d] scales and zeros, got %d and %d",
			n, groups, len(scales), len(zeros))
	}
	if err := dt.valid(); err != nil {
		return err
	}
	if err := checkLen("tinygemm scales_and_zeros", src, groups*n*2*dt.Size()); err != nil {
		return err
	}
	for g := 0; g < groups; g++ {
		for j := 0; j < n; j++ {
			i := (g*n + j) * 2
			scales[j*groups+g], zeros[j*groups+g] = dt.Param(src, i), dt.Param(src, i+1)
		}
	}
	return nil
}
