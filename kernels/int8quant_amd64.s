//go:build amd64

#include "textflag.h"

// AVX2 kernels of the per-channel int8 quantizer (int8quant.go): absmax of
// bf16 bits, and quantize-and-measure of a bf16 row with the bf16 -> f32
// widening fused in.

// Q4HALF is QHALF for the 4-bit grids on float32 input: r = clamp(rint((w
// - z)*inv), -8, 7), codes r + 8, d = w - (r*s + z); s, z and the int32 8s
// sit in the frame at 512, 544 and 576(SP).
#define Q4HALF(off, wsq, dsq, creg) \
	VMOVUPS off(SI), Y0 \
	VSUBPS 544(SP), Y0, Y1 \
	VMULPS Y15, Y1, Y1 \
	VROUNDPS $0, Y1, Y1 \
	VMAXPS Y13, Y1, Y1 \
	VMINPS Y12, Y1, Y1 \
	VCVTPS2DQ Y1, creg \
	VMULPS 512(SP), Y1, Y3 \
	VADDPS 544(SP), Y3, Y3 \
	VPADDD 576(SP), creg, creg \
	VSUBPS Y3, Y0, Y3 \
	VANDPS Y14, Y3, Y4 \
	VPMAXUD Y4, Y11, Y11 \
	VMULPS Y0, Y0, Y0 \
	VMOVUPS Y0, wsq(SP) \
	VMULPS Y3, Y3, Y3 \
	VMOVUPS Y3, dsq(SP)

// PACK16 packs the int32 codes of a block's two halves (Y2, Y8) into 16
// int16 in order; STORE32 packs two such blocks (Y5, Y6) to 32 bytes in
// order and stores them; HMAXBITS leaves the largest uint32 lane of Y11 in
// AX.
#define PACK16(r) \
	VPACKSSDW Y8, Y2, r \
	VPERMQ $0xd8, r, r

#define STORE32(dst) \
	VPACKSSWB Y6, Y5, Y7 \
	VPERMQ $0xd8, Y7, Y7 \
	VMOVDQU Y7, dst

#define HMAXBITS \
	VEXTRACTI128 $1, Y11, X0 \
	VPMAXUD X0, X11, X0 \
	VPSHUFD $0x4e, X0, X1 \
	VPMAXUD X1, X0, X0 \
	VPSHUFD $0xb1, X0, X1 \
	VPMAXUD X1, X0, X0 \
	VMOVD X0, AX

// HMAXU16 leaves the largest uint16 lane of Y0 in AX (clobbers X1).
#define HMAXU16 \
	VEXTRACTI128 $1, Y0, X1 \
	VPMAXUW X1, X0, X0 \
	VPSHUFD $0x4e, X0, X1 \
	VPMAXUW X1, X0, X0 \
	VPSHUFD $0xb1, X0, X1 \
	VPMAXUW X1, X0, X0 \
	VPSRLD $16, X0, X1 \
	VPMAXUW X1, X0, X0 \
	VMOVD X0, AX

// func absmaxBF16AVX2(src *uint16, n int) uint16
// max over i < n of src[i] & 0x7fff; n is a positive multiple of 64.
TEXT ·absmaxBF16AVX2(SB), NOSPLIT, $0-18
	MOVQ src+0(FP), SI
	MOVQ n+8(FP), CX
	SHRQ $6, CX
	MOVL $0x7fff7fff, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
amloop:
	VPAND (SI), Y15, Y4
	VPAND 32(SI), Y15, Y5
	VPAND 64(SI), Y15, Y6
	VPAND 96(SI), Y15, Y7
	VPMAXUW Y4, Y0, Y0
	VPMAXUW Y5, Y1, Y1
	VPMAXUW Y6, Y2, Y2
	VPMAXUW Y7, Y3, Y3
	ADDQ $128, SI
	DECQ CX
	JNZ amloop
	VPMAXUW Y1, Y0, Y0
	VPMAXUW Y3, Y2, Y2
	VPMAXUW Y2, Y0, Y0
	HMAXU16
	MOVW AX, ret+16(FP)
	VZEROUPPER
	RET

// QHALF quantizes 8 bf16 values at off(SI) with scale Y15: int32 codes
// into creg, w*w to wsq(SP), d*d to dsq(SP) (d = w - code*scale), |d| bits
// max-accumulated into Y11. Y13/Y12 hold -128 and 127, Y14 the abs mask.
#define QHALF(off, wsq, dsq, creg) \
	VPMOVZXWD off(SI), Y0 \
	VPSLLD $16, Y0, Y0 \
	VDIVPS Y15, Y0, Y1 \
	VROUNDPS $0, Y1, Y1 \
	VMAXPS Y13, Y1, Y1 \
	VMINPS Y12, Y1, Y1 \
	VCVTPS2DQ Y1, creg \
	VCVTDQ2PS creg, Y3 \
	VMULPS Y15, Y3, Y3 \
	VSUBPS Y3, Y0, Y3 \
	VANDPS Y14, Y3, Y4 \
	VPMAXUD Y4, Y11, Y11 \
	VMULPS Y0, Y0, Y0 \
	VMOVUPS Y0, wsq(SP) \
	VMULPS Y3, Y3, Y3 \
	VMOVUPS Y3, dsq(SP)

// PAIRS transposes four rows of 4 float32 pairs (64-bit elements) a0..a3
// into columns c0..c3 using t0..t3.
#define PAIRS(a0, a1, a2, a3, t0, t1, t2, t3, c0, c1, c2, c3) \
	VUNPCKLPD a1, a0, t0 \
	VUNPCKHPD a1, a0, t1 \
	VUNPCKLPD a3, a2, t2 \
	VUNPCKHPD a3, a2, t3 \
	VPERM2F128 $0x20, t2, t0, c0 \
	VPERM2F128 $0x20, t3, t1, c1 \
	VPERM2F128 $0x31, t2, t0, c2 \
	VPERM2F128 $0x31, t3, t1, c3

// STATS adds the squares of 4 blocks of 16 stored at b(SP) (block j at
// b+64j) to the float64 accumulator acc the way quant's blockStats does:
// per block, two float32 lanes (even and odd elements) summed in element
// order, their sum widened, blocks added in order.
#define STATS(b0, b1, b2, b3, b4, b5, b6, b7, acc) \
	VMOVUPS b0(SP), Y0 \
	VMOVUPS b2(SP), Y1 \
	VMOVUPS b4(SP), Y2 \
	VMOVUPS b6(SP), Y3 \
	PAIRS(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y0, Y1, Y2, Y3) \
	VADDPS Y1, Y0, Y0 \
	VADDPS Y2, Y0, Y0 \
	VADDPS Y3, Y0, Y0 \
	VMOVUPS b1(SP), Y1 \
	VMOVUPS b3(SP), Y2 \
	VMOVUPS b5(SP), Y3 \
	VMOVUPS b7(SP), Y4 \
	PAIRS(Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y1, Y2, Y3, Y4) \
	VADDPS Y1, Y0, Y0 \
	VADDPS Y2, Y0, Y0 \
	VADDPS Y3, Y0, Y0 \
	VADDPS Y4, Y0, Y0 \
	VPERMILPS $0xb1, Y0, Y1 \
	VADDPS Y1, Y0, Y0 \
	VSHUFPS $0x88, Y0, Y0, Y1 \
	VEXTRACTF128 $1, Y1, X2 \
	VUNPCKLPD X2, X1, X1 \
	VCVTPS2PD X1, Y1 \
	VADDSD X1, acc, acc \
	VUNPCKHPD X1, X1, X2 \
	VADDSD X2, acc, acc \
	VEXTRACTF128 $1, Y1, X2 \
	VADDSD X2, acc, acc \
	VUNPCKHPD X2, X2, X2 \
	VADDSD X2, acc, acc

// func int8BF16AVX2(dst *int8, src *uint16, n64 int, scale float32, acc *[2]float64) uint32
// Quantizes n64*64 bf16 values: dst[i] = clamp(rint(w/scale), -128, 127);
// adds Σw² and Σd² to acc[0], acc[1] in blockStats order and returns the
// bits of max |d|. n64 > 0.
TEXT ·int8BF16AVX2(SB), 0, $512-44
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n64+16(FP), CX
	VBROADCASTSS scale+24(FP), Y15
	MOVQ acc+32(FP), DX
	MOVL $0x7fffffff, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	MOVL $0xc3000000, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	MOVL $0x42fe0000, AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12
	VPXOR Y11, Y11, Y11
	VMOVSD 0(DX), X9
	VMOVSD 8(DX), X10
qloop:
	QHALF(0, 0, 256, Y2)
	QHALF(16, 32, 288, Y8)
	PACK16(Y5)
	QHALF(32, 64, 320, Y2)
	QHALF(48, 96, 352, Y8)
	PACK16(Y6)
	STORE32((DI))
	QHALF(64, 128, 384, Y2)
	QHALF(80, 160, 416, Y8)
	PACK16(Y5)
	QHALF(96, 192, 448, Y2)
	QHALF(112, 224, 480, Y8)
	PACK16(Y6)
	STORE32(32(DI))
	STATS(0, 32, 64, 96, 128, 160, 192, 224, X9)
	STATS(256, 288, 320, 352, 384, 416, 448, 480, X10)
	ADDQ $128, SI
	ADDQ $64, DI
	DECQ CX
	JNZ qloop
	VMOVSD X9, 0(DX)
	VMOVSD X10, 8(DX)
	HMAXBITS
	MOVL AX, ret+40(FP)
	VZEROUPPER
	RET

// func quant4F32AVX2(dst *uint8, w *float32, n64 int, s, z, inv float32, acc *[2]float64) uint32
// The 4-bit grids' quantize-and-measure pass (quant's sym4Kernel with z =
// 0, asym4Kernel) over n64*64 float32 values, statistics as int8BF16AVX2.
TEXT ·quant4F32AVX2(SB), 0, $608-52
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ n64+16(FP), CX
	VBROADCASTSS s+24(FP), Y0
	VMOVUPS Y0, 512(SP)
	VBROADCASTSS z+28(FP), Y0
	VMOVUPS Y0, 544(SP)
	MOVL $8, AX
	VMOVD AX, X0
	VPBROADCASTD X0, Y0
	VMOVDQU Y0, 576(SP)
	VBROADCASTSS inv+32(FP), Y15
	MOVQ acc+40(FP), DX
	MOVL $0x7fffffff, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	MOVL $0xc1000000, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	MOVL $0x40e00000, AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12
	VPXOR Y11, Y11, Y11
	VMOVSD 0(DX), X9
	VMOVSD 8(DX), X10
q4loop:
	Q4HALF(0, 0, 256, Y2)
	Q4HALF(32, 32, 288, Y8)
	PACK16(Y5)
	Q4HALF(64, 64, 320, Y2)
	Q4HALF(96, 96, 352, Y8)
	PACK16(Y6)
	STORE32((DI))
	Q4HALF(128, 128, 384, Y2)
	Q4HALF(160, 160, 416, Y8)
	PACK16(Y5)
	Q4HALF(192, 192, 448, Y2)
	Q4HALF(224, 224, 480, Y8)
	PACK16(Y6)
	STORE32(32(DI))
	STATS(0, 32, 64, 96, 128, 160, 192, 224, X9)
	STATS(256, 288, 320, 352, 384, 416, 448, 480, X10)
	ADDQ $256, SI
	ADDQ $64, DI
	DECQ CX
	JNZ q4loop
	VMOVSD X9, 0(DX)
	VMOVSD X10, 8(DX)
	HMAXBITS
	MOVL AX, ret+48(FP)
	VZEROUPPER
	RET

// func widenBF16AVX2(dst *float32, src *uint16, n16 int) uint16
// dst[i] = float32 of the bf16 bits src[i] for i < 16*n16; returns max
// src[i] & 0x7fff. n16 > 0.
TEXT ·widenBF16AVX2(SB), NOSPLIT, $0-26
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n16+16(FP), CX
	MOVL $0x7fff7fff, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	VPXOR Y0, Y0, Y0
wloop:
	VPAND (SI), Y15, Y1
	VPMAXUW Y1, Y0, Y0
	VPMOVZXWD (SI), Y2
	VPMOVZXWD 16(SI), Y3
	VPSLLD $16, Y2, Y2
	VPSLLD $16, Y3, Y3
	VMOVUPS Y2, (DI)
	VMOVUPS Y3, 32(DI)
	ADDQ $32, SI
	ADDQ $64, DI
	DECQ CX
	JNZ wloop
	HMAXU16
	MOVW AX, ret+24(FP)
	VZEROUPPER
	RET

// func absmaxF32AVX2(w *float32, n16 int) uint32
// max over i < 16*n16 of the bits of w[i] & 0x7fffffff; n16 > 0.
TEXT ·absmaxF32AVX2(SB), NOSPLIT, $0-20
	MOVQ w+0(FP), SI
	MOVQ n16+8(FP), CX
	MOVL $0x7fffffff, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
afloop:
	VPAND (SI), Y15, Y2
	VPAND 32(SI), Y15, Y3
	VPMAXUD Y2, Y0, Y0
	VPMAXUD Y3, Y1, Y1
	ADDQ $64, SI
	DECQ CX
	JNZ afloop
	VPMAXUD Y1, Y0, Y11
	HMAXBITS
	MOVL AX, ret+16(FP)
	VZEROUPPER
	RET
