//go:build amd64

#include "textflag.h"

// The 4-bit searches' passes (sym4search.go). The error passes sum the
// squared errors in package quant's order: per block of 16 values, four
// float32 lanes over elements l, l+4, l+8, l+12 in order (SQ16), combined
// as (e0+e1)+(e2+e3), widened, blocks added to the float64 total in order.
// Blocks go four at a time (the three VHADDPS of QUAD combine all four at
// once), and the total is compared with the limit after every four (and
// after each block of a remainder): a pass that stops early has passed the
// limit somewhere in its last four blocks, and its total only grew since.

// SYMCODES: the symmetric grid's codes r = clamp(rint(w*inv), -8, 7) of
// the 16 values (Y0, Y1) into (Y2, Y3), as float32 (Y15 inv, Y13 -8, Y12
// 7). ASYMCODES: the asymmetric grid's, r = clamp(rint((w - z)*inv), -8,
// 7) (Y11 z).
#define SYMCODES \
	VMULPS Y15, Y0, Y2 \
	VMULPS Y15, Y1, Y3 \
	CLAMP

#define ASYMCODES \
	VSUBPS Y11, Y0, Y2 \
	VSUBPS Y11, Y1, Y3 \
	VMULPS Y15, Y2, Y2 \
	VMULPS Y15, Y3, Y3 \
	CLAMP

#define CLAMP \
	VROUNDPS $0, Y2, Y2 \
	VROUNDPS $0, Y3, Y3 \
	VMAXPS Y13, Y2, Y2 \
	VMAXPS Y13, Y3, Y3 \
	VMINPS Y12, Y2, Y2 \
	VMINPS Y12, Y3, Y3

// SYMERR16 leaves in res the four lanes of one block's squared errors on
// the symmetric grid, d = w - r*s (Y14 s); ASYMERR16 those on the
// asymmetric grid, d = w - (r*s + z). Both clobber Y0-Y3.
#define SYMERR16(off0, off1, res) \
	VMOVUPS off0(SI), Y0 \
	VMOVUPS off1(SI), Y1 \
	SYMCODES \
	VMULPS Y14, Y2, Y2 \
	VMULPS Y14, Y3, Y3 \
	SQ16(res)

#define ASYMERR16(off0, off1, res) \
	VMOVUPS off0(SI), Y0 \
	VMOVUPS off1(SI), Y1 \
	ASYMCODES \
	VMULPS Y14, Y2, Y2 \
	VMULPS Y14, Y3, Y3 \
	VADDPS Y11, Y2, Y2 \
	VADDPS Y11, Y3, Y3 \
	SQ16(res)

// SQ16: the block's errors d = (Y0, Y1) - (Y2, Y3), squared, folded to
// four lanes (lane l: ((d_l² + d_{l+4}²) + d_{l+8}²) + d_{l+12}²) in res.
#define SQ16(res) \
	VSUBPS Y2, Y0, Y0 \
	VSUBPS Y3, Y1, Y1 \
	VMULPS Y0, Y0, Y0 \
	VMULPS Y1, Y1, Y1 \
	VEXTRACTF128 $1, Y0, X2 \
	VADDPS X2, X0, res \
	VADDPS X1, res, res \
	VEXTRACTF128 $1, Y1, X2 \
	VADDPS X2, res, res

// QUAD adds the sums of four blocks (lanes in X5, X7, X8, X9) to the total
// X10 in block order. Clobbers X4, Y5, X8.
#define QUAD \
	VHADDPS X7, X5, X5 \
	VHADDPS X9, X8, X8 \
	VHADDPS X8, X5, X5 \
	VCVTPS2PD X5, Y5 \
	VADDSD X5, X10, X10 \
	VUNPCKHPD X5, X5, X4 \
	VADDSD X4, X10, X10 \
	VEXTRACTF128 $1, Y5, X5 \
	VADDSD X5, X10, X10 \
	VUNPCKHPD X5, X5, X4 \
	VADDSD X4, X10, X10

// ONE adds one block's sum (lanes in X5) to the total X10.
#define ONE \
	VPERMILPS $0xb1, X5, X4 \
	VADDPS X4, X5, X5 \
	VMOVHLPS X5, X5, X4 \
	VADDSS X4, X5, X5 \
	VCVTSS2SD X5, X5, X5 \
	VADDSD X5, X10, X10

// CONSTS sets Y13 = -8 and Y12 = 7 and zeroes the total X10.
#define CONSTS \
	MOVL $0xc1000000, AX \
	VMOVD AX, X13 \
	VPBROADCASTD X13, Y13 \
	MOVL $0x40e00000, AX \
	VMOVD AX, X12 \
	VPBROADCASTD X12, Y12 \
	VXORPD X10, X10, X10

// ERRLOOP runs the error pass with block macro blk over CX > 0 blocks at
// SI, comparing the total with the limit in lim: it jumps to early when the
// total passed it, and falls through at the end of a complete pass. quad,
// one and done are the loop's labels.
#define ERRLOOP(blk, lim, quad, one, done, early) \
	CMPQ CX, $4 \
	JLT one \
quad: \
	blk(0, 32, X5) \
	blk(64, 96, X7) \
	blk(128, 160, X8) \
	blk(192, 224, X9) \
	QUAD \
	UCOMISD lim, X10 \
	JA early \
	ADDQ $256, SI \
	SUBQ $4, CX \
	CMPQ CX, $4 \
	JGE quad \
one: \
	TESTQ CX, CX \
	JZ done \
	blk(0, 32, X5) \
	ONE \
	UCOMISD lim, X10 \
	JA early \
	ADDQ $64, SI \
	DECQ CX \
	JMP one \
done:

// func sym4ErrAVX2(w *float32, n16 int, s, inv float32, limit float64) (total float64, complete bool)
// The error pass of the symmetric 4-bit search over n16 > 0 blocks.
TEXT ·sym4ErrAVX2(SB), NOSPLIT, $0-41
	MOVQ w+0(FP), SI
	MOVQ n16+8(FP), CX
	VBROADCASTSS s+16(FP), Y14
	VBROADCASTSS inv+20(FP), Y15
	VMOVSD limit+24(FP), X11
	CONSTS
	ERRLOOP(SYMERR16, X11, squad, sone, sdone, searly)
	VMOVSD X10, total+32(FP)
	MOVB $1, complete+40(FP)
	VZEROUPPER
	RET
searly:
	VMOVSD X10, total+32(FP)
	MOVB $0, complete+40(FP)
	VZEROUPPER
	RET

// func asym4ErrAVX2(w *float32, n16 int, s, z, inv float32, limit float64) (total float64, complete bool)
// The error pass of the asymmetric 4-bit search over n16 > 0 blocks.
TEXT ·asym4ErrAVX2(SB), NOSPLIT, $0-49
	MOVQ w+0(FP), SI
	MOVQ n16+8(FP), CX
	VBROADCASTSS s+16(FP), Y14
	VBROADCASTSS z+20(FP), Y11
	VBROADCASTSS inv+24(FP), Y15
	VMOVSD limit+32(FP), X6
	CONSTS
	ERRLOOP(ASYMERR16, X6, aquad, aone, adone, aearly)
	VMOVSD X10, total+40(FP)
	MOVB $1, complete+48(FP)
	VZEROUPPER
	RET
aearly:
	VMOVSD X10, total+40(FP)
	MOVB $0, complete+48(FP)
	VZEROUPPER
	RET

// The least-squares refit's sums of a candidate, over the codes r of n16
// > 0 blocks: Σ w·r in float64 (Y9; the caller ensures no partial sum
// rounds, so the order does not matter), Σ r² (Y8) and Σ r (Y7) in float32
// (small integers, exact).

// WR16 adds Σ w·r of the block (Y0, Y1) with codes (Y2, Y3) to Y9, and Σ
// r² to Y8. Clobbers Y4, Y5.
#define WR16 \
	VMULPS Y2, Y2, Y4 \
	VADDPS Y4, Y8, Y8 \
	VMULPS Y3, Y3, Y4 \
	VADDPS Y4, Y8, Y8 \
	VCVTPS2PD X0, Y4 \
	VCVTPS2PD X2, Y5 \
	VMULPD Y5, Y4, Y4 \
	VADDPD Y4, Y9, Y9 \
	VEXTRACTF128 $1, Y0, X4 \
	VEXTRACTF128 $1, Y2, X5 \
	VCVTPS2PD X4, Y4 \
	VCVTPS2PD X5, Y5 \
	VMULPD Y5, Y4, Y4 \
	VADDPD Y4, Y9, Y9 \
	VCVTPS2PD X1, Y4 \
	VCVTPS2PD X3, Y5 \
	VMULPD Y5, Y4, Y4 \
	VADDPD Y4, Y9, Y9 \
	VEXTRACTF128 $1, Y1, X4 \
	VEXTRACTF128 $1, Y3, X5 \
	VCVTPS2PD X4, Y4 \
	VCVTPS2PD X5, Y5 \
	VMULPD Y5, Y4, Y4 \
	VADDPD Y4, Y9, Y9

// HSUMPD stores the sum of the four float64 lanes of yreg (xreg its low
// half) at dst; HSUMPS that of the eight float32 lanes, widened. Clobber
// X0, X1.
#define HSUMPD(yreg, xreg, dst) \
	VEXTRACTF128 $1, yreg, X0 \
	VADDPD X0, xreg, X0 \
	VPERMILPD $1, X0, X1 \
	VADDSD X1, X0, X0 \
	VMOVSD X0, dst

#define HSUMPS(yreg, xreg, dst) \
	VEXTRACTF128 $1, yreg, X0 \
	VADDPS X0, xreg, X0 \
	VPERMILPS $0x4e, X0, X1 \
	VADDPS X1, X0, X0 \
	VPERMILPS $0xb1, X0, X1 \
	VADDSS X1, X0, X0 \
	VCVTSS2SD X0, X0, X0 \
	VMOVSD X0, dst

// func sym4SumsAVX2(w *float32, n16 int, inv float32, sums *[2]float64)
// sums = Σ w·r, Σ r² of the symmetric codes.
TEXT ·sym4SumsAVX2(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ n16+8(FP), CX
	VBROADCASTSS inv+16(FP), Y15
	MOVQ sums+24(FP), DX
	CONSTS
	VXORPD Y9, Y9, Y9
	VXORPS Y8, Y8, Y8
ssloop:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	SYMCODES
	WR16
	ADDQ $64, SI
	DECQ CX
	JNZ ssloop
	HSUMPD(Y9, X9, 0(DX))
	HSUMPS(Y8, X8, 8(DX))
	VZEROUPPER
	RET

// func asym4SumsAVX2(w *float32, n16 int, z, inv float32, sums *[3]float64)
// sums = Σ w·r, Σ r², Σ r of the asymmetric codes.
TEXT ·asym4SumsAVX2(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ n16+8(FP), CX
	VBROADCASTSS z+16(FP), Y11
	VBROADCASTSS inv+20(FP), Y15
	MOVQ sums+24(FP), DX
	CONSTS
	VXORPD Y9, Y9, Y9
	VXORPS Y8, Y8, Y8
	VXORPS Y7, Y7, Y7
asloop:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	ASYMCODES
	VADDPS Y2, Y7, Y7
	VADDPS Y3, Y7, Y7
	WR16
	ADDQ $64, SI
	DECQ CX
	JNZ asloop
	HSUMPD(Y9, X9, 0(DX))
	HSUMPS(Y8, X8, 8(DX))
	HSUMPS(Y7, X7, 16(DX))
	VZEROUPPER
	RET

// RANGE8 folds the 8 float32 values in reg (xreg its low half) into the range accumulators:
// min Y0, max Y1 (a NaN never replaces them: the old value is kept),
// max |w| bits Y2, min (|w| bits - 1) Y3 (so zeros, as 0xffffffff, never
// win), and Σw in the float64 accumulators s0 (low 4) and s1 (high 4).
#define RANGE8(reg, xreg, s0, s1) \
	VMINPS Y0, reg, Y0 \
	VMAXPS Y1, reg, Y1 \
	VANDPS Y15, reg, Y8 \
	VPMAXUD Y8, Y2, Y2 \
	VPADDD Y14, Y8, Y8 \
	VPMINUD Y8, Y3, Y3 \
	VCVTPS2PD xreg, Y9 \
	VADDPD Y9, s0, s0 \
	VEXTRACTF128 $1, reg, X9 \
	VCVTPS2PD X9, Y9 \
	VADDPD Y9, s1, s1

// func rangeF32AVX2(w *float32, n16 int, r *Range)
// The range of w[:16*n16] (see RangeF32); n16 > 0 and w[0] is not NaN.
TEXT ·rangeF32AVX2(SB), NOSPLIT, $0-24
	MOVQ w+0(FP), SI
	MOVQ n16+8(FP), CX
	MOVQ r+16(FP), DX
	MOVL $0x7fffffff, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	VPCMPEQD Y14, Y14, Y14
	VBROADCASTSS (SI), Y0
	VMOVAPS Y0, Y1
	VPXOR Y2, Y2, Y2
	VMOVDQA Y14, Y3
	VXORPD Y4, Y4, Y4
	VXORPD Y5, Y5, Y5
	VXORPD Y6, Y6, Y6
	VXORPD Y7, Y7, Y7
rloop:
	VMOVUPS (SI), Y10
	VMOVUPS 32(SI), Y11
	RANGE8(Y10, X10, Y4, Y5)
	RANGE8(Y11, X11, Y6, Y7)
	ADDQ $64, SI
	DECQ CX
	JNZ rloop
	// lo: the minimum over the lanes, hi the maximum (lanes hold no NaN).
	VEXTRACTF128 $1, Y0, X8
	VMINPS X8, X0, X0
	VPERMILPS $0x4e, X0, X8
	VMINPS X8, X0, X0
	VPERMILPS $0xb1, X0, X8
	VMINSS X8, X0, X0
	VMOVSS X0, 0(DX)
	VEXTRACTF128 $1, Y1, X8
	VMAXPS X8, X1, X1
	VPERMILPS $0x4e, X1, X8
	VMAXPS X8, X1, X1
	VPERMILPS $0xb1, X1, X8
	VMAXSS X8, X1, X1
	VMOVSS X1, 4(DX)
	VEXTRACTI128 $1, Y2, X8
	VPMAXUD X8, X2, X2
	VPSHUFD $0x4e, X2, X8
	VPMAXUD X8, X2, X2
	VPSHUFD $0xb1, X2, X8
	VPMAXUD X8, X2, X2
	VMOVD X2, 8(DX)
	VEXTRACTI128 $1, Y3, X8
	VPMINUD X8, X3, X3
	VPSHUFD $0x4e, X3, X8
	VPMINUD X8, X3, X3
	VPSHUFD $0xb1, X3, X8
	VPMINUD X8, X3, X3
	VPSUBD X14, X3, X3
	VMOVD X3, 12(DX)
	VADDPD Y5, Y4, Y4
	VADDPD Y7, Y6, Y6
	VADDPD Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X8
	VADDPD X8, X4, X4
	VPERMILPD $1, X4, X8
	VADDSD X8, X4, X4
	VMOVSD X4, 16(DX)
	VZEROUPPER
	RET
