//go:build ignore

// gen_asm writes gemm_amd64.s (register-tiled GEMM micro-kernels for
// AVX-512 and AVX2+FMA), pack_amd64.s (AVX-512 transposes, float32 ->
// float64 accumulation, dot products), avx2_amd64.s (the AVX2 packers and
// dot products), dotbf16_amd64.s (the AVX512-BF16 micro-kernel) and
// gelu_amd64.s (GELU's float64 erf on AVX-512). Run with `go generate`
// (see arch_amd64.go).
package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
)

// kern describes one micro-kernel: C[mr x nvec*lanes] += A-panel * B-panel.
type kern struct {
	name  string
	mr    int    // rows (broadcast operand)
	nvec  int    // vectors per row
	vbyte int    // bytes per vector register (64 zmm, 32 ymm)
	esize int    // bytes per element
	reg   string // "Z" or "Y"
	nregs int    // architectural vector registers
}

func (k kern) sfx() string {
	if k.esize == 4 {
		return "PS"
	}
	return "PD"
}

func (k kern) bcast() string {
	if k.esize == 4 {
		return "VBROADCASTSS"
	}
	return "VBROADCASTSD"
}

func (k kern) zero(r string) string {
	if k.reg == "Z" {
		return fmt.Sprintf("VPXORD %s, %s, %s", r, r, r)
	}
	return fmt.Sprintf("VXORPS %s, %s, %s", r, r, r)
}

func (k kern) emit(w *bytes.Buffer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, "\t"+format+"\n", a...) }
	acc := func(r, v int) string { return fmt.Sprintf("%s%d", k.reg, r*k.nvec+v) }
	nacc := k.mr * k.nvec
	breg := func(v int) string { return fmt.Sprintf("%s%d", k.reg, nacc+v) }
	areg := func(r int) string { return fmt.Sprintf("%s%d", k.reg, nacc+k.nvec+r%2) }
	if nacc+k.nvec+2 > k.nregs {
		panic(k.name + ": too many registers")
	}
	nr := k.nvec * k.vbyte / k.esize
	fmt.Fprintf(w, "// func %s(k int, a, b, c *float%d, ldc int)\n", k.name, 8*k.esize)
	fmt.Fprintf(w, "// C[%d x %d] += A (k x %d packed) * B (k x %d packed); ldc in elements.\n", k.mr, nr, k.mr, nr)
	fmt.Fprintf(w, "TEXT ·%s(SB), NOSPLIT, $0-40\n", k.name)
	p("MOVQ k+0(FP), CX")
	p("MOVQ a+8(FP), SI")
	p("MOVQ b+16(FP), DX")
	p("MOVQ c+24(FP), DI")
	p("MOVQ ldc+32(FP), R8")
	p("SHLQ $%d, R8", map[int]int{4: 2, 8: 3}[k.esize])
	// Prefetch the C tile: its rows are read back after the k loop.
	p("MOVQ DI, R9")
	for r := range k.mr {
		for off := 0; off < k.nvec*k.vbyte; off += 64 {
			p("PREFETCHT0 %d(R9)", off)
		}
		if r+1 < k.mr {
			p("ADDQ R8, R9")
		}
	}
	for i := range nacc {
		p("%s", k.zero(fmt.Sprintf("%s%d", k.reg, i)))
	}
	p("TESTQ CX, CX")
	p("JZ %s_store", k.name)
	fmt.Fprintf(w, "%s_loop:\n", k.name)
	for v := range k.nvec {
		p("VMOVUP%s %d(DX), %s", k.sfx()[1:], v*k.vbyte, breg(v))
	}
	for r := range k.mr {
		p("%s %d(SI), %s", k.bcast(), r*k.esize, areg(r))
		for v := range k.nvec {
			p("VFMADD231%s %s, %s, %s", k.sfx(), areg(r), breg(v), acc(r, v))
		}
	}
	p("ADDQ $%d, SI", k.mr*k.esize)
	p("ADDQ $%d, DX", k.nvec*k.vbyte)
	p("DECQ CX")
	p("JNZ %s_loop", k.name)
	fmt.Fprintf(w, "%s_store:\n", k.name)
	for r := range k.mr {
		for v := range k.nvec {
			p("VADD%s %d(DI), %s, %s", k.sfx(), v*k.vbyte, acc(r, v), acc(r, v))
			p("VMOVUP%s %s, %d(DI)", k.sfx()[1:], acc(r, v), v*k.vbyte)
		}
		if r+1 < k.mr {
			p("ADDQ R8, DI")
		}
	}
	p("VZEROUPPER")
	p("RET")
	fmt.Fprintln(w)
}

// asm accumulates one assembly file.
type asm struct{ bytes.Buffer }

// I writes one indented instruction line.
func (a *asm) I(format string, args ...any) { fmt.Fprintf(a, "\t"+format+"\n", args...) }

// L writes an unindented line (labels, TEXT, comments).
func (a *asm) L(format string, args ...any) { fmt.Fprintf(a, format+"\n", args...) }

// loadRows loads n rows of 64 bytes, stride AX bytes, from SI into Z0..Zn-1.
func (a *asm) loadRows(n int, op string) {
	for r := range n {
		a.I("%s (SI), Z%d", op, r)
		if r+1 < n {
			a.I("ADDQ AX, SI")
		}
	}
}

// transpose16 transposes the 16x16 float32 block in Z0..Z15 in place
// (Z16..Z31 are scratch): unpack pairs, shuffle quads, then 128-bit lanes.
func (a *asm) transpose16() {
	for i := range 8 {
		a.I("VUNPCKLPS Z%d, Z%d, Z%d", 2*i+1, 2*i, 16+2*i)
		a.I("VUNPCKHPS Z%d, Z%d, Z%d", 2*i+1, 2*i, 16+2*i+1)
	}
	for i := range 4 {
		t := func(j int) int { return 16 + j }
		a.I("VSHUFPS $0x44, Z%d, Z%d, Z%d", t(4*i+2), t(4*i), 4*i)
		a.I("VSHUFPS $0xEE, Z%d, Z%d, Z%d", t(4*i+2), t(4*i), 4*i+1)
		a.I("VSHUFPS $0x44, Z%d, Z%d, Z%d", t(4*i+3), t(4*i+1), 4*i+2)
		a.I("VSHUFPS $0xEE, Z%d, Z%d, Z%d", t(4*i+3), t(4*i+1), 4*i+3)
	}
	for _, h := range []int{0, 8} {
		for j := range 4 {
			a.I("VSHUFF32X4 $0x88, Z%d, Z%d, Z%d", h+j+4, h+j, 16+h+j)
			a.I("VSHUFF32X4 $0xDD, Z%d, Z%d, Z%d", h+j+4, h+j, 16+h+j+4)
		}
	}
	for j := range 8 {
		a.I("VSHUFF32X4 $0x88, Z%d, Z%d, Z%d", 16+j+8, 16+j, j)
		a.I("VSHUFF32X4 $0xDD, Z%d, Z%d, Z%d", 16+j+8, 16+j, j+8)
	}
}

func (a *asm) transpose16x16() {
	a.L("// func transpose16x16AVX512(src *float32, lds int, dst *float32, ldd int, mask uint16)")
	a.L("// Reads the 16x16 block src[r*lds+c] (r, c < 16) and writes its transpose")
	a.L("// dst[c*ldd+r] for the rows r whose bit is set in mask. Strides in elements.")
	a.L("TEXT ·transpose16x16AVX512(SB), NOSPLIT, $0-34")
	a.I("MOVQ src+0(FP), SI")
	a.I("MOVQ lds+8(FP), AX")
	a.I("MOVQ dst+16(FP), DI")
	a.I("MOVQ ldd+24(FP), BX")
	a.I("KMOVW mask+32(FP), K1")
	a.I("SHLQ $2, AX")
	a.I("SHLQ $2, BX")
	a.loadRows(16, "VMOVUPS")
	a.transposeStore("VMOVUPS", "K1")
}

// transposeStore transposes Z0..Z15 (transpose16), writes them as 16 rows
// BX bytes apart from DI with op under mask register k, and returns.
func (a *asm) transposeStore(op, k string) {
	a.transpose16()
	for r := range 16 {
		a.I("%s Z%d, %s, (DI)", op, r, k)
		if r < 15 {
			a.I("ADDQ BX, DI")
		}
	}
	a.I("VZEROUPPER")
	a.I("RET")
	a.L("")
}

// addF32ToF64 emits dst[i] += float64(src[i]) for i < n with vector
// registers of prefix reg ("Z": 8 float64 lanes, AVX-512; "Y": 4, AVX2): the
// widening is exact and each add rounds once, so every variant gives the
// portable loop's bits.
func (a *asm) addF32ToF64(name, reg string, lanes int) {
	a.L("// func %s(dst *float64, src *float32, n int)", name)
	a.L("// dst[i] += float64(src[i]) for i < n.")
	a.L("TEXT ·%s(SB), NOSPLIT, $0-24", name)
	a.I("MOVQ dst+0(FP), DI")
	a.I("MOVQ src+8(FP), SI")
	a.I("MOVQ n+16(FP), CX")
	l := func(s string) string { return name + "_" + s }
	a.L("%s:", l("loop4"))
	a.I("CMPQ CX, $%d", 4*lanes)
	a.I("JLT %s", l("loop1"))
	for u := range 4 {
		a.I("VCVTPS2PD %d(SI), %s%d", 4*lanes*u, reg, u)
	}
	for u := range 4 {
		a.I("VADDPD %d(DI), %s%d, %s%d", 8*lanes*u, reg, u, reg, u)
	}
	for u := range 4 {
		a.I("VMOVUPD %s%d, %d(DI)", reg, u, 8*lanes*u)
	}
	a.I("ADDQ $%d, SI", 16*lanes)
	a.I("ADDQ $%d, DI", 32*lanes)
	a.I("SUBQ $%d, CX", 4*lanes)
	a.I("JMP %s", l("loop4"))
	a.L("%s:", l("loop1"))
	a.I("CMPQ CX, $%d", lanes)
	a.I("JLT %s", l("tail"))
	a.I("VCVTPS2PD (SI), %s0", reg)
	a.I("VADDPD (DI), %s0, %s0", reg, reg)
	a.I("VMOVUPD %s0, (DI)", reg)
	a.I("ADDQ $%d, SI", 4*lanes)
	a.I("ADDQ $%d, DI", 8*lanes)
	a.I("SUBQ $%d, CX", lanes)
	a.I("JMP %s", l("loop1"))
	a.L("%s:", l("tail"))
	a.I("TESTQ CX, CX")
	a.I("JZ %s", l("done"))
	a.I("VCVTSS2SD (SI), X0, X0")
	a.I("VADDSD (DI), X0, X0")
	a.I("VMOVSD X0, (DI)")
	a.I("ADDQ $4, SI")
	a.I("ADDQ $8, DI")
	a.I("DECQ CX")
	a.I("JMP %s", l("tail"))
	a.L("%s:", l("done"))
	a.I("VZEROUPPER")
	a.I("RET")
	a.L("")
}

func (a *asm) transposeAdd() {
	a.L("// func transposeAddF32ToF64AVX512(dst *float64, ldd int, src *float32, lds int)")
	a.L("// dst[c*ldd+r] += float64(src[r*lds+c]) for r, c < 16. Strides in elements.")
	a.L("TEXT ·transposeAddF32ToF64AVX512(SB), NOSPLIT, $0-32")
	a.I("MOVQ dst+0(FP), DI")
	a.I("MOVQ ldd+8(FP), BX")
	a.I("MOVQ src+16(FP), SI")
	a.I("MOVQ lds+24(FP), AX")
	a.I("SHLQ $2, AX")
	a.I("SHLQ $3, BX")
	a.loadRows(16, "VMOVUPS")
	a.transpose16()
	for r := range 16 {
		a.I("VCVTPS2PD Y%d, Z16", r)
		a.I("VEXTRACTF64X4 $1, Z%d, Y17", r)
		a.I("VCVTPS2PD Y17, Z17")
		a.I("VADDPD (DI), Z16, Z16")
		a.I("VADDPD 64(DI), Z17, Z17")
		a.I("VMOVUPD Z16, (DI)")
		a.I("VMOVUPD Z17, 64(DI)")
		if r < 15 {
			a.I("ADDQ BX, DI")
		}
	}
	a.I("VZEROUPPER")
	a.I("RET")
	a.L("")
}

// sdot4 writes the AVX-512 four-row dot product over float32 rows
// (sdot4AVX512) or bf16 rows widened exactly on load (sdot4BF16AVX512:
// VPMOVZXWD, then VPSLLD 16, a bf16 being the top half of its float32).
// Both run the same FMAs in the same order, so a bf16 row gives the sums
// of its widened float32 row bit for bit.
func (a *asm) sdot4(bf16 bool) {
	rows := []string{"SI", "R8", "R9", "R10"}
	name, typ, lbl, shift := "sdot4AVX512", "float32", "sdot4", 2
	if bf16 {
		name, typ, lbl, shift = "sdot4BF16AVX512", "uint16", "sdot4bf", 1
	}
	a.L("// func %s(b *%s, ldb int, x *float32, k int, y *float32)", name, typ)
	a.L("// y[r] = sum_{p<k} b[r*ldb+p]*x[p] for r < 4; k is a multiple of 16.")
	a.L("TEXT ·%s(SB), NOSPLIT, $0-40", name)
	a.I("MOVQ b+0(FP), SI")
	a.I("MOVQ ldb+8(FP), AX")
	a.I("MOVQ x+16(FP), DX")
	a.I("MOVQ k+24(FP), CX")
	a.I("MOVQ y+32(FP), DI")
	a.I("SHLQ $%d, AX", shift)
	a.I("LEAQ (SI)(AX*1), R8")
	a.I("LEAQ (SI)(AX*2), R9")
	a.I("LEAQ (R8)(AX*2), R10")
	for i := range 8 {
		a.I("VPXORD Z%d, Z%d, Z%d", i, i, i)
	}
	a.I("XORQ BX, BX") // offset into x, in bytes
	idx := "BX"        // offset into the rows: x's, or half of it for bf16
	if bf16 {
		idx = "R12"
		a.I("XORQ R12, R12")
	}
	a.I("SHLQ $2, CX")
	mem := func(off int, base string) string {
		if off == 0 {
			return fmt.Sprintf("(%s)(%s*1)", base, idx)
		}
		return fmt.Sprintf("%d(%s)(%s*1)", off, base, idx)
	}
	// fma adds row r's 16 values at byte offset off times x's vector xv
	// into accumulator acc.
	fma := func(r, off, xv, acc int) {
		if !bf16 {
			a.I("VFMADD231PS %s, Z%d, Z%d", mem(2*off, rows[r]), xv, acc)
			return
		}
		a.I("VPMOVZXWD %s, Z%d", mem(off, rows[r]), 18+acc)
		a.I("VPSLLD $16, Z%d, Z%d", 18+acc, 18+acc)
		a.I("VFMADD231PS Z%d, Z%d, Z%d", 18+acc, xv, acc)
	}
	advance := func(bytes int) { // the rows' offset, when it is not x's
		if bf16 {
			a.I("ADDQ $%d, R12", bytes/2)
		}
	}
	a.L("%s_loop32:", lbl)
	a.I("LEAQ 128(BX), R11")
	a.I("CMPQ R11, CX")
	a.I("JGT %s_loop16", lbl)
	a.I("VMOVUPS (DX)(BX*1), Z16")
	a.I("VMOVUPS 64(DX)(BX*1), Z17")
	for r := range rows {
		fma(r, 0, 16, r)
		fma(r, 32, 17, r+4)
	}
	a.I("MOVQ R11, BX")
	advance(128)
	a.I("JMP %s_loop32", lbl)
	a.L("%s_loop16:", lbl)
	a.I("CMPQ BX, CX")
	a.I("JGE %s_reduce", lbl)
	a.I("VMOVUPS (DX)(BX*1), Z16")
	for r := range rows {
		fma(r, 0, 16, r)
	}
	a.I("ADDQ $64, BX")
	advance(64)
	a.I("JMP %s_loop16", lbl)
	a.L("%s_reduce:", lbl)
	for r := range 4 {
		a.I("VADDPS Z%d, Z%d, Z%d", r+4, r, r)
		a.I("VEXTRACTF64X4 $1, Z%d, Y8", r)
		a.I("VADDPS Y8, Y%d, Y%d", r, r)
		a.I("VEXTRACTF128 $1, Y%d, X8", r)
		a.I("VADDPS X8, X%d, X%d", r, r)
		a.I("VHADDPS X%d, X%d, X%d", r, r, r)
		a.I("VHADDPS X%d, X%d, X%d", r, r, r)
		a.I("VMOVSS X%d, %d(DI)", r, 4*r)
	}
	a.I("VZEROUPPER")
	a.I("RET")
	a.L("")
}

func (a *asm) transpose8x8F64() {
	a.L("// func transpose8x8F64AVX512(src *float64, lds int, dst *float64, ldd int, mask uint8, alpha float64)")
	a.L("// dst[c*ldd+r] = alpha*src[r*lds+c] for r, c < 8 and the rows r whose bit")
	a.L("// is set in mask. Strides in elements.")
	a.L("TEXT ·transpose8x8F64AVX512(SB), NOSPLIT, $0-48")
	a.I("MOVQ src+0(FP), SI")
	a.I("MOVQ lds+8(FP), AX")
	a.I("MOVQ dst+16(FP), DI")
	a.I("MOVQ ldd+24(FP), BX")
	a.I("KMOVB mask+32(FP), K1")
	a.I("VBROADCASTSD alpha+40(FP), Z31")
	a.I("SHLQ $3, AX")
	a.I("SHLQ $3, BX")
	a.loadRows(8, "VMOVUPD")
	for i := range 4 {
		a.I("VUNPCKLPD Z%d, Z%d, Z%d", 2*i+1, 2*i, 8+2*i)
		a.I("VUNPCKHPD Z%d, Z%d, Z%d", 2*i+1, 2*i, 8+2*i+1)
	}
	t := func(j int) int { return 8 + j }
	u := func(j int) int { return 16 + j }
	for _, h := range []int{0, 4} {
		a.I("VSHUFF64X2 $0x88, Z%d, Z%d, Z%d", t(h+2), t(h), u(h))
		a.I("VSHUFF64X2 $0x88, Z%d, Z%d, Z%d", t(h+3), t(h+1), u(h+1))
		a.I("VSHUFF64X2 $0xDD, Z%d, Z%d, Z%d", t(h+2), t(h), u(h+2))
		a.I("VSHUFF64X2 $0xDD, Z%d, Z%d, Z%d", t(h+3), t(h+1), u(h+3))
	}
	for j := range 4 {
		a.I("VSHUFF64X2 $0x88, Z%d, Z%d, Z%d", u(j+4), u(j), j)
		a.I("VSHUFF64X2 $0xDD, Z%d, Z%d, Z%d", u(j+4), u(j), j+4)
	}
	for r := range 8 {
		a.I("VMULPD Z31, Z%d, Z%d", r, r)
		a.I("VMOVUPD Z%d, K1, (DI)", r)
		if r < 7 {
			a.I("ADDQ BX, DI")
		}
	}
	a.I("VZEROUPPER")
	a.I("RET")
	a.L("")
}

// transpose8AVX2 writes an AVX2 B-panel packer for a transposed B: 8
// rows transposed 8x8 in registers, either float32 or bf16 widened exactly
// to float32 on load (VPMOVZXWD, then VPSLLD 16: a bf16 is the top half of
// its float32).
func (a *asm) transpose8AVX2(bf16 bool) {
	name, typ, lbl, esz := "transposeF32x8AVX2", "float32", "tf32", 4
	if bf16 {
		name, typ, lbl, esz = "widenTransBF16x8AVX2", "uint16", "wbf16", 2
	}
	a.L("// func %s(src *%s, lds int, dst *float32, ldd int, k8 int)", name, typ)
	if bf16 {
		a.L("// dst[p*ldd+r] = float32 bits src[r*lds+p] << 16 for r < 8, p < k8 (a multiple")
	} else {
		a.L("// dst[p*ldd+r] = src[r*lds+p] for r < 8, p < k8 (a multiple")
	}
	a.L("// of 8). Strides in elements.")
	a.L("TEXT ·%s(SB), NOSPLIT, $0-40", name)
	a.I("MOVQ src+0(FP), R8")
	a.I("MOVQ lds+8(FP), AX")
	a.I("MOVQ dst+16(FP), DI")
	a.I("MOVQ ldd+24(FP), CX")
	a.I("MOVQ k8+32(FP), DX")
	a.I("SHLQ $%d, AX", map[int]int{2: 1, 4: 2}[esz])
	a.I("SHLQ $2, CX")
	a.I("LEAQ (R8)(AX*1), R9")
	a.I("LEAQ (R8)(AX*2), R10")
	a.I("LEAQ (R9)(AX*2), R11")
	a.I("LEAQ (AX*4), BX")
	a.I("SHRQ $3, DX")
	a.I("JZ %s_done", lbl)
	a.L("%s_loop:", lbl)
	load := "VMOVUPS"
	if bf16 {
		load = "VPMOVZXWD"
	}
	for r, base := range []string{"R8", "R9", "R10", "R11"} {
		a.I("%s (%s), Y%d", load, base, r)
		a.I("%s (%s)(BX*1), Y%d", load, base, r+4)
	}
	for r := range 8 {
		if bf16 {
			a.I("VPSLLD $16, Y%d, Y%d", r, r)
		}
	}
	// 8x8 transpose: unpack pairs, shuffle quads, swap 128-bit lanes.
	for i := range 4 {
		a.I("VUNPCKLPS Y%d, Y%d, Y%d", 2*i+1, 2*i, 8+2*i)
		a.I("VUNPCKHPS Y%d, Y%d, Y%d", 2*i+1, 2*i, 8+2*i+1)
	}
	for h := range 2 {
		t := 8 + 4*h
		a.I("VSHUFPS $0x44, Y%d, Y%d, Y%d", t+2, t, 4*h)
		a.I("VSHUFPS $0xEE, Y%d, Y%d, Y%d", t+2, t, 4*h+1)
		a.I("VSHUFPS $0x44, Y%d, Y%d, Y%d", t+3, t+1, 4*h+2)
		a.I("VSHUFPS $0xEE, Y%d, Y%d, Y%d", t+3, t+1, 4*h+3)
	}
	for j := range 4 {
		a.I("VPERM2F128 $0x20, Y%d, Y%d, Y%d", j+4, j, 8+j)
		a.I("VPERM2F128 $0x31, Y%d, Y%d, Y%d", j+4, j, 12+j)
	}
	for r := range 8 {
		a.I("VMOVUPS Y%d, (DI)", 8+r)
		a.I("ADDQ CX, DI")
	}
	for _, base := range []string{"R8", "R9", "R10", "R11"} {
		a.I("ADDQ $%d, %s", 8*esz, base)
	}
	a.I("DECQ DX")
	a.I("JNZ %s_loop", lbl)
	a.L("%s_done:", lbl)
	a.I("VZEROUPPER")
	a.I("RET")
	a.L("")
}

// dot4AVX2 writes a 4-row dot-product kernel that keeps dotGo's order: 8
// lane sums, each a separate multiply then add (no FMA), so the partial
// sums are bit for bit those of the portable kernel. bf16 rows are widened
// exactly on load.
func (a *asm) dot4AVX2(name string, bf16 bool) {
	typ, esz := "float32", 4
	if bf16 {
		typ, esz = "uint16", 2
	}
	rows := []string{"SI", "R8", "R9", "R10"}
	a.L("// func %s(b *%s, ldb int, x *float32, k8 int, acc *float32)", name, typ)
	a.L("// acc[r*8+l] = sum over p = l mod 8, p < k8, of b[r*ldb+p]*x[p], for r < 4:")
	a.L("// each lane a running sum of rounded products (k8 a multiple of 8).")
	a.L("TEXT ·%s(SB), NOSPLIT, $0-40", name)
	a.I("MOVQ b+0(FP), SI")
	a.I("MOVQ ldb+8(FP), AX")
	a.I("MOVQ x+16(FP), DX")
	a.I("MOVQ k8+24(FP), CX")
	a.I("MOVQ acc+32(FP), DI")
	a.I("SHLQ $%d, AX", map[int]int{2: 1, 4: 2}[esz])
	a.I("LEAQ (SI)(AX*1), R8")
	a.I("LEAQ (SI)(AX*2), R9")
	a.I("LEAQ (R8)(AX*2), R10")
	for i := range 4 {
		a.I("VXORPS Y%d, Y%d, Y%d", i, i, i)
	}
	a.I("SHRQ $3, CX")
	a.I("JZ %s_store", name)
	a.L("%s_loop:", name)
	a.I("VMOVUPS (DX), Y8")
	for r, base := range rows {
		if bf16 {
			a.I("VPMOVZXWD (%s), Y%d", base, 4+r)
			a.I("VPSLLD $16, Y%d, Y%d", 4+r, 4+r)
			a.I("VMULPS Y8, Y%d, Y%d", 4+r, 4+r)
		} else {
			a.I("VMULPS (%s), Y8, Y%d", base, 4+r)
		}
		a.I("VADDPS Y%d, Y%d, Y%d", 4+r, r, r)
	}
	for _, base := range rows {
		a.I("ADDQ $%d, %s", 8*esz, base)
	}
	a.I("ADDQ $32, DX")
	a.I("DECQ CX")
	a.I("JNZ %s_loop", name)
	a.L("%s_store:", name)
	for r := range 4 {
		a.I("VMOVUPS Y%d, %d(DI)", r, 32*r)
	}
	a.I("VZEROUPPER")
	a.I("RET")
	a.L("")
}

// evexRR encodes the register form of an EVEX.512 instruction of opcode
// map 0F38 (pp: 1 = 66, 2 = F3, 3 = F2; W0) that Go's assembler lacks:
// dst in ModRM.reg, src1 in EVEX.vvvv, src2 in ModRM.rm, all zmm 0-31.
func evexRR(pp, opc byte, dst, src1, src2 int) string {
	inv := func(b int) byte { return byte(^b & 1) }
	p0 := inv(dst>>3)<<7 | inv(src2>>4)<<6 | inv(src2>>3)<<5 | inv(dst>>4)<<4 | 2
	p1 := byte(^src1&15)<<3 | 1<<2 | pp
	p2 := 2<<5 | inv(src1>>4)<<3
	modrm := 3<<6 | byte(dst&7)<<3 | byte(src2&7)
	return fmt.Sprintf("BYTE $0x62; BYTE $0x%02X; BYTE $0x%02X; BYTE $0x%02X; BYTE $0x%02X; BYTE $0x%02X", p0, p1, p2, opc, modrm)
}

// vdpbf16ps is VDPBF16PS zmm(src2), zmm(src1), zmm(dst) in Go's operand
// order: dst.fp32[i] += src1.bf16[2i+1]*src2.bf16[2i+1], then
// += src1.bf16[2i]*src2.bf16[2i] (EVEX.512.F3.0F38.W0 52 /r).
func vdpbf16ps(src2, src1, dst int) string {
	return evexRR(2, 0x52, dst, src1, src2) + fmt.Sprintf(" // VDPBF16PS Z%d, Z%d, Z%d", src2, src1, dst)
}

// dotBF16Kernel writes the AVX512-BF16 micro-kernel: C[14 x 32] += A * B
// over kp pairs of the reduction, A packed as 14 dwords a pair (each two
// bf16 of one row), B as 32 dwords a pair (two bf16 of one column); one
// VDPBF16PS per 16 columns and row a pair, fp32 accumulation.
func (a *asm) dotBF16Kernel() {
	const mr, name = 14, "dotBF16AVX512x14x32"
	a.L("// func %s(kp int, a, b *uint16, c *float32, ldc int)", name)
	a.L("// C[14 x 32] += A (kp pairs x 14 rows packed) * B (kp pairs x 32 columns")
	a.L("// packed), each pair two bf16 in one dword; ldc in elements.")
	a.L("TEXT ·%s(SB), NOSPLIT, $0-40", name)
	a.I("MOVQ kp+0(FP), CX")
	a.I("MOVQ a+8(FP), SI")
	a.I("MOVQ b+16(FP), DX")
	a.I("MOVQ c+24(FP), DI")
	a.I("MOVQ ldc+32(FP), R8")
	a.I("SHLQ $2, R8")
	a.I("MOVQ DI, R9")
	for r := range mr {
		a.I("PREFETCHT0 (R9)")
		a.I("PREFETCHT0 64(R9)")
		if r+1 < mr {
			a.I("ADDQ R8, R9")
		}
	}
	for i := range 2 * mr {
		a.I("VPXORD Z%d, Z%d, Z%d", i, i, i)
	}
	a.I("TESTQ CX, CX")
	a.I("JZ %s_store", name)
	a.L("%s_loop:", name)
	a.I("VMOVUPS (DX), Z28")
	a.I("VMOVUPS 64(DX), Z29")
	for r := range mr {
		br := 30 + r%2
		a.I("VPBROADCASTD %d(SI), Z%d", 4*r, br)
		a.I("%s", vdpbf16ps(28, br, 2*r))
		a.I("%s", vdpbf16ps(29, br, 2*r+1))
	}
	a.I("ADDQ $%d, SI", 4*mr)
	a.I("ADDQ $128, DX")
	a.I("DECQ CX")
	a.I("JNZ %s_loop", name)
	a.L("%s_store:", name)
	for r := range mr {
		for v := range 2 {
			a.I("VADDPS %d(DI), Z%d, Z%d", 64*v, 2*r+v, 2*r+v)
			a.I("VMOVUPS Z%d, %d(DI)", 2*r+v, 64*v)
		}
		if r+1 < mr {
			a.I("ADDQ R8, DI")
		}
	}
	a.I("VZEROUPPER")
	a.I("RET")
	a.L("")
}

// roundBF16 rounds the 16 float32 of Z(x) to bf16 in place (the low 16
// bits of each dword; the rest zero): round to nearest even, a NaN kept a
// quiet NaN. Z(t) and Z(u) are scratch; Z26..Z30 hold the constants
// roundTransBF16 loads.
func (a *asm) roundBF16(x, t, u int) {
	a.I("VPSRLD $16, Z%d, Z%d", x, t)
	a.I("VPANDD Z26, Z%d, Z%d", t, t)
	a.I("VPADDD Z27, Z%d, Z%d", t, t)
	a.I("VPADDD Z%d, Z%d, Z%d", x, t, t)
	a.I("VPANDD Z28, Z%d, Z%d", x, u)
	a.I("VPCMPUD $6, Z29, Z%d, K1", u)
	a.I("VPORD Z30, Z%d, K1, Z%d", x, t)
	a.I("VPSRLD $16, Z%d, Z%d", t, x)
}

// roundTransBF16 writes the packer of the bf16 dot kernel's operands:
// 16 rows of 32 float32 rounded to bf16 pairs and transposed as dwords.
func (a *asm) roundTransBF16() {
	a.L("// func roundTransBF16AVX512(src *float32, lds int, dst *uint32, ldd int, mask uint16)")
	a.L("// For r < 16 and i < 16, with w[r][i] = bf16(src[r*lds+2i]) | bf16(src[r*lds+2i+1])<<16")
	a.L("// (round to nearest even, NaN quieted), writes dst[i*ldd+r] = w[r][i] for")
	a.L("// the rows r whose bit is set in mask. Strides in elements.")
	a.L("TEXT ·roundTransBF16AVX512(SB), NOSPLIT, $0-34")
	a.I("MOVQ src+0(FP), SI")
	a.I("MOVQ lds+8(FP), AX")
	a.I("MOVQ dst+16(FP), DI")
	a.I("MOVQ ldd+24(FP), BX")
	a.I("KMOVW mask+32(FP), K2")
	a.I("SHLQ $2, AX")
	a.I("SHLQ $2, BX")
	for i, c := range []string{"$1", "$0x7FFF", "$0x7FFFFFFF", "$0x7F800000", "$0x00400000"} {
		a.I("MOVL %s, CX", c)
		a.I("VPBROADCASTD CX, Z%d", 26+i)
	}
	for r := range 16 {
		a.I("VMOVDQU32 (SI), Z16")
		a.I("VMOVDQU32 64(SI), Z17")
		a.roundBF16(16, 18, 19)
		a.roundBF16(17, 20, 21)
		a.I("VPMOVDW Z16, Y16")
		a.I("VPMOVDW Z17, Y17")
		a.I("VINSERTI64X4 $1, Y17, Z16, Z%d", r)
		if r < 15 {
			a.I("ADDQ AX, SI")
		}
	}
	a.transposeStore("VMOVDQU32", "K2")
}

// geluConst is one float64 (or, with bits set, a 64-bit pattern) of
// geluErfAVX512's table.
type geluConst struct {
	name string
	v    float64
	bits uint64
}

// geluConsts are math.Erf's constants, copied from Go's math/erf.go (from
// FreeBSD's s_erf.c), and math.Exp's from math/exp_amd64.s, so the
// assembly holds the same float64 values the Go compiler and assembler
// made of the same literals.
var geluConsts = []geluConst{
	{name: "sqrt2", v: 1.41421356237309504880168872420969807856967187537694807317667974}, // math.Sqrt2
	{name: "half", v: 0.5}, {name: "one", v: 1}, {name: "two", v: 2}, {name: "zero", v: 0},
	{name: "small", v: 1.0 / (1 << 28)}, {name: "b1", v: 0.84375}, {name: "b2", v: 1.25},
	{name: "b3", v: 1 / 0.35}, {name: "b4", v: 6}, {name: "maxf32", v: math.MaxFloat32},
	{name: "c5625", v: 0.5625},
	{name: "erx", v: 8.45062911510467529297e-01}, {name: "efx", v: 1.28379167095512586316e-01},
	{name: "pp0", v: 1.28379167095512558561e-01}, {name: "pp1", v: -3.25042107247001499370e-01},
	{name: "pp2", v: -2.84817495755985104766e-02}, {name: "pp3", v: -5.77027029648944159157e-03},
	{name: "pp4", v: -2.37630166566501626084e-05},
	{name: "qq1", v: 3.97917223959155352819e-01}, {name: "qq2", v: 6.50222499887672944485e-02},
	{name: "qq3", v: 5.08130628187576562776e-03}, {name: "qq4", v: 1.32494738004321644526e-04},
	{name: "qq5", v: -3.96022827877536812320e-06},
	{name: "pa0", v: -2.36211856075265944077e-03}, {name: "pa1", v: 4.14856118683748331666e-01},
	{name: "pa2", v: -3.72207876035701323847e-01}, {name: "pa3", v: 3.18346619901161753674e-01},
	{name: "pa4", v: -1.10894694282396677476e-01}, {name: "pa5", v: 3.54783043256182359371e-02},
	{name: "pa6", v: -2.16637559486879084300e-03},
	{name: "qa1", v: 1.06420880400844228286e-01}, {name: "qa2", v: 5.40397917702171048937e-01},
	{name: "qa3", v: 7.18286544141962662868e-02}, {name: "qa4", v: 1.26171219808761642112e-01},
	{name: "qa5", v: 1.36370839120290507362e-02}, {name: "qa6", v: 1.19844998467991074170e-02},
	{name: "ra0", v: -9.86494403484714822705e-03}, {name: "ra1", v: -6.93858572707181764372e-01},
	{name: "ra2", v: -1.05586262253232909814e+01}, {name: "ra3", v: -6.23753324503260060396e+01},
	{name: "ra4", v: -1.62396669462573470355e+02}, {name: "ra5", v: -1.84605092906711035994e+02},
	{name: "ra6", v: -8.12874355063065934246e+01}, {name: "ra7", v: -9.81432934416914548592e+00},
	{name: "sa1", v: 1.96512716674392571292e+01}, {name: "sa2", v: 1.37657754143519042600e+02},
	{name: "sa3", v: 4.34565877475229228821e+02}, {name: "sa4", v: 6.45387271733267880336e+02},
	{name: "sa5", v: 4.29008140027567833386e+02}, {name: "sa6", v: 1.08635005541779435134e+02},
	{name: "sa7", v: 6.57024977031928170135e+00}, {name: "sa8", v: -6.04244152148580987438e-02},
	{name: "rb0", v: -9.86494292470009928597e-03}, {name: "rb1", v: -7.99283237680523006574e-01},
	{name: "rb2", v: -1.77579549177547519889e+01}, {name: "rb3", v: -1.60636384855821916062e+02},
	{name: "rb4", v: -6.37566443368389627722e+02}, {name: "rb5", v: -1.02509513161107724954e+03},
	{name: "rb6", v: -4.83519191608651397019e+02},
	{name: "sb1", v: 3.03380607434824582924e+01}, {name: "sb2", v: 3.25792512996573918826e+02},
	{name: "sb3", v: 1.53672958608443695994e+03}, {name: "sb4", v: 3.19985821950859553908e+03},
	{name: "sb5", v: 2.55305040643316442583e+03}, {name: "sb6", v: 4.74528541206955367215e+02},
	{name: "sb7", v: -2.24409524465858183362e+01},
	// math.Exp (exp_amd64.s): the reduction and the Taylor coefficients.
	{name: "log2e", v: 1.4426950408889634073599246810018920},
	{name: "ln2u", v: 0.69314718055966295651160180568695068359375},
	{name: "ln2l", v: 0.28235290563031577122588448175013436025525412068e-12},
	{name: "c0625", v: 0.0625},
	{name: "e24", v: 1.6666666666666666667e-1}, {name: "e32", v: 4.1666666666666666667e-2},
	{name: "e40", v: 8.3333333333333333333e-3}, {name: "e48", v: 1.3888888888888888889e-3},
	{name: "e56", v: 1.9841269841269841270e-4}, {name: "e64", v: 2.4801587301587301587e-5},
	// bit patterns
	{name: "absmask", bits: 0x7FFFFFFFFFFFFFFF}, {name: "signbit", bits: 0x8000000000000000},
	{name: "himask", bits: 0xFFFFFFFF00000000}, {name: "bias", bits: 0x3FF},
}

// geluTable writes geluConsts as the read-only table geluc<> and returns
// each constant's operand, relative to CX (which holds the table's address).
func (a *asm) geluTable() func(name string) string {
	off := map[string]int{}
	for i, c := range geluConsts {
		b := c.bits
		if b == 0 {
			b = math.Float64bits(c.v)
		}
		a.L("DATA geluc<>+%d(SB)/8, $%#016x // %s", 8*i, b, c.name)
		off[c.name] = 8 * i
	}
	a.L("GLOBL geluc<>(SB), RODATA|NOPTR, $%d\n", 8*len(geluConsts))
	return func(name string) string {
		o, ok := off[name]
		if !ok {
			panic("geluErf: no constant " + name)
		}
		return fmt.Sprintf("%d(CX)", o)
	}
}

// geluErf writes geluErfAVX512 (8 values a step) or geluErfAVX2 (4),
// GELUErf's float64 formula float32(0.5*f*(1+math.Erf(f/math.Sqrt2))) with
// math.Erf's and math.Exp's operations (Exp's FMA path, which every
// AVX2+FMA CPU takes) replayed one for one in each lane, so every result
// is the Go code's bit for bit. math.Erf's branches become masks (K
// registers on AVX-512, vector masks on AVX2): each of its ranges is
// computed for the whole vector (skipped when no lane is in it) and
// merged into the lanes that are. It stops before the first block holding
// a NaN or an infinity (the Go code does those) and returns how many
// values it wrote. Register 15 holds broadcast constants on AVX2.
func (a *asm) geluErf(c func(string) string, avx512 bool) {
	name, lanes, r := "geluErfAVX2", 4, "Y"
	if avx512 {
		name, lanes, r = "geluErfAVX512", 8, "Z"
	}
	R := func(n int) string { return fmt.Sprintf("%s%d", r, n) }
	// Masks: on AVX-512 the K register k, on AVX2 the vector register y.
	type mask struct{ k, y int }
	M := func(m mask) string {
		if avx512 {
			return fmt.Sprintf("K%d", m.k)
		}
		return fmt.Sprintf("Y%d", m.y)
	}
	bcast := func(cn string, dst int) { a.I("VBROADCASTSD %s, %s", c(cn), R(dst)) }
	// op: dst = src OP constant (integer ops take their AVX2 names).
	op := func(ins, cn string, src, dst int) {
		if avx512 {
			a.I("%s.BCST %s, %s, %s", ins, c(cn), R(src), R(dst))
			return
		}
		switch ins {
		case "VPANDQ":
			ins = "VANDPD"
		case "VPXORQ":
			ins = "VXORPD"
		}
		if ins == "VPADDQ" {
			a.I("VPBROADCASTQ %s, Y15", c(cn))
		} else {
			bcast(cn, 15)
		}
		a.I("%s Y15, %s, %s", ins, R(src), R(dst))
	}
	rr := func(ins string, src2, src1, dst int) { a.I("%s %s, %s, %s", ins, R(src2), R(src1), R(dst)) }
	cmp := func(pred int, src int, cn string, m mask) {
		if avx512 {
			a.I("VCMPPD.BCST $%d, %s, %s, %s", pred, c(cn), R(src), M(m))
			return
		}
		bcast(cn, 15)
		a.I("VCMPPD $%d, Y15, %s, %s", pred, R(src), M(m))
	}
	lt := func(src int, cn string, m mask) { cmp(1, src, cn, m) }
	andn := func(x, y, m mask) { // m = ~x & y
		if avx512 {
			a.I("KANDNW %s, %s, %s", M(y), M(x), M(m))
			return
		}
		a.I("VANDNPD %s, %s, %s", M(y), M(x), M(m))
	}
	jump := func(m mask, jcc, label string) {
		if avx512 {
			a.I("KORTESTW %s, %s", M(m), M(m))
		} else {
			a.I("VMOVMSKPD %s, R11", M(m))
			a.I("TESTQ R11, R11")
		}
		a.I("%s %s", jcc, label)
	}
	merge := func(src int, m mask, dst int) { // dst = m ? src : dst
		if avx512 {
			a.I("VMOVAPD %s, %s, %s", R(src), M(m), R(dst))
			return
		}
		a.I("VBLENDVPD %s, %s, %s, %s", M(m), R(src), R(dst), R(dst))
	}
	// horner: dst = cs[0] + s*(cs[1] + s*(... + s*cs[n-1])), in the Go
	// expression's order (innermost product first).
	horner := func(dst, s int, cs ...string) {
		n := len(cs) - 1
		op("VMULPD", cs[n], s, dst)
		for i := n - 1; i >= 1; i-- {
			op("VADDPD", cs[i], dst, dst)
			rr("VMULPD", s, dst, dst)
		}
		op("VADDPD", cs[0], dst, dst)
	}
	// exp: v = math.Exp(v) for arguments in [-708, 709] (no overflow,
	// underflow or denormal result: GELU's are in [-37, 1]); registers
	// 11-13 are scratch.
	exp := func(v int) {
		t, p, b := 11, 12, 13
		narrow := "X" // the int32 exponents fill half a vector
		if avx512 {
			narrow = "Y"
		}
		op("VMULPD", "log2e", v, t)
		if avx512 {
			a.I("VCVTPD2DQ %s, Y%d", R(t), b)
		} else {
			a.I("VCVTPD2DQY %s, X%d", R(t), b)
		}
		a.I("VCVTDQ2PD %s%d, %s", narrow, b, R(t))
		fma := func(ins, cn string, x, dst int) {
			if avx512 {
				a.I("%s.BCST %s, %s, %s", ins, c(cn), R(x), R(dst))
				return
			}
			bcast(cn, 15)
			a.I("%s Y15, %s, %s", ins, R(x), R(dst))
		}
		fma("VFNMADD231PD", "ln2u", t, v) // v = -(t*ln2u) + v
		fma("VFNMADD231PD", "ln2l", t, v)
		op("VMULPD", "c0625", v, v)
		bcast("e64", p)
		for _, e := range []string{"e56", "e48", "e40", "e32", "e24", "half", "one"} {
			fma("VFMADD213PD", e, v, p) // p = v*p + e
		}
		rr("VMULPD", p, v, v)
		for range 3 {
			op("VADDPD", "two", v, p)
			rr("VMULPD", p, v, v)
		}
		op("VADDPD", "two", v, p)
		fma("VFMADD213PD", "one", p, v) // v = p*v + 1
		a.I("VPMOVSXDQ %s%d, %s", narrow, b, R(b))
		op("VPADDQ", "bias", b, b)
		a.I("VPSLLQ $52, %s, %s", R(b), R(b))
		rr("VMULPD", b, v, v)
	}
	var (
		sign  = mask{1, 1}
		inA   = mask{2, 4}
		tiny  = mask{5, 8}
		below = mask{3, 5} // a range's upper bound, consumed by andn
		inBC  = mask{6, 4}
		c1    = mask{7, 10}
		bad   = mask{5, 14}
	)
	lbl := func(s string) string { return name + "_" + s }
	// between sets inBC to lo <= ax < hi and jumps to skip when no lane is.
	between := func(lo, hi, skip string) {
		lt(2, lo, inA)
		lt(2, hi, below)
		andn(inA, below, inBC)
		jump(inBC, "JZ", skip)
	}
	a.L("// func %s(x *float32, n int) (done int)", name)
	a.L("// n counts blocks of %d values.", lanes)
	a.L("TEXT ·%s(SB), NOSPLIT, $0-24", name)
	a.I("MOVQ x+0(FP), SI")
	a.I("MOVQ n+8(FP), DX")
	a.I("LEAQ geluc<>(SB), CX")
	a.I("XORQ AX, AX")
	a.L("%s:", lbl("loop"))
	a.I("CMPQ AX, DX")
	a.I("JGE %s", lbl("done"))
	a.I("VCVTPS2PD (SI), %s", R(0)) // f
	op("VPANDQ", "absmask", 0, 14)
	cmp(6, 14, "maxf32", bad) // !(|f| <= MaxFloat32): NaN or Inf
	jump(bad, "JNZ", lbl("done"))
	op("VDIVPD", "sqrt2", 0, 1) // x = f/Sqrt2
	op("VPANDQ", "absmask", 1, 2)
	lt(1, "zero", sign) // x < 0 (-0 is not)
	bcast("one", 3)     // erf(ax) for ax >= 6
	// ax < 0.84375: ax + ax*(r/s), or ax + efx*ax below 2**-28.
	lt(2, "b1", inA)
	jump(inA, "JZ", lbl("b"))
	rr("VMULPD", 2, 2, 5)
	horner(6, 5, "pp0", "pp1", "pp2", "pp3", "pp4")
	horner(7, 5, "one", "qq1", "qq2", "qq3", "qq4", "qq5")
	rr("VDIVPD", 7, 6, 6)
	rr("VMULPD", 2, 6, 6)
	rr("VADDPD", 2, 6, 6)
	lt(2, "small", tiny)
	op("VMULPD", "efx", 2, 9)
	rr("VADDPD", 2, 9, 9)
	merge(9, tiny, 6)
	merge(6, inA, 3)
	// 0.84375 <= ax < 1.25: erx + P/Q over s = ax - 1.
	a.L("%s:", lbl("b"))
	between("b1", "b2", lbl("c"))
	op("VSUBPD", "one", 2, 5)
	horner(6, 5, "pa0", "pa1", "pa2", "pa3", "pa4", "pa5", "pa6")
	horner(7, 5, "one", "qa1", "qa2", "qa3", "qa4", "qa5", "qa6")
	rr("VDIVPD", 7, 6, 6)
	op("VADDPD", "erx", 6, 6)
	merge(6, inBC, 3)
	// 1.25 <= ax < 6: 1 - exp(-z*z-0.5625)*exp((z-ax)*(z+ax)+R/S)/ax over
	// s = 1/(ax*ax), R/S from ra/sa below 1/0.35 and rb/sb above, z = ax
	// with its low 32 bits cleared.
	a.L("%s:", lbl("c"))
	between("b2", "b4", lbl("sign"))
	rr("VMULPD", 2, 2, 5)
	bcast("one", 15)
	rr("VDIVPD", 5, 15, 5)
	horner(6, 5, "ra0", "ra1", "ra2", "ra3", "ra4", "ra5", "ra6", "ra7")
	horner(7, 5, "one", "sa1", "sa2", "sa3", "sa4", "sa5", "sa6", "sa7", "sa8")
	horner(8, 5, "rb0", "rb1", "rb2", "rb3", "rb4", "rb5", "rb6")
	horner(9, 5, "one", "sb1", "sb2", "sb3", "sb4", "sb5", "sb6", "sb7")
	lt(2, "b3", c1)
	merge(6, c1, 8)
	merge(7, c1, 9)
	rr("VDIVPD", 9, 8, 8)        // R/S
	op("VPANDQ", "himask", 2, 6) // z
	rr("VMULPD", 6, 6, 7)
	op("VADDPD", "c5625", 7, 7)
	op("VPXORQ", "signbit", 7, 7) // -z*z - 0.5625
	rr("VSUBPD", 2, 6, 9)         // z - ax
	rr("VADDPD", 2, 6, 10)        // z + ax
	rr("VMULPD", 10, 9, 9)
	rr("VADDPD", 8, 9, 9)
	exp(7)
	exp(9)
	rr("VMULPD", 9, 7, 7)
	rr("VDIVPD", 2, 7, 7)
	bcast("one", 15)
	rr("VSUBPD", 7, 15, 7)
	merge(7, inBC, 3)
	// erf(x) = -erf(ax) for x < 0; GELU = (0.5*f) * (1 + erf(x)).
	a.L("%s:", lbl("sign"))
	if avx512 {
		a.I("VXORPD.BCST %s, Z3, K1, Z3", c("signbit"))
	} else {
		bcast("signbit", 15)
		a.I("VANDPD Y15, Y1, Y15")
		a.I("VXORPD Y15, Y3, Y3")
	}
	op("VADDPD", "one", 3, 3)
	op("VMULPD", "half", 0, 0)
	rr("VMULPD", 3, 0, 0)
	if avx512 {
		a.I("VCVTPD2PS Z0, Y0")
		a.I("VMOVUPS Y0, (SI)")
	} else {
		a.I("VCVTPD2PSY Y0, X0")
		a.I("VMOVUPS X0, (SI)")
	}
	a.I("ADDQ $%d, SI", 4*lanes)
	a.I("INCQ AX")
	a.I("JMP %s", lbl("loop"))
	a.L("%s:", lbl("done"))
	a.I("SHLQ $%d, AX", map[int]int{4: 2, 8: 3}[lanes])
	a.I("MOVQ AX, done+16(FP)")
	a.I("VZEROUPPER")
	a.I("RET")
	a.L("")
}

func writeFile(name string, b []byte) {
	if err := os.WriteFile(name, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func main() {
	var p asm
	p.L("// Code generated by gen_asm.go; DO NOT EDIT.\n\n//go:build amd64\n\n#include \"textflag.h\"\n")
	p.L("// AVX-512 packing, conversion and dot-product helpers.\n")
	p.transpose16x16()
	p.addF32ToF64("addF32ToF64AVX512", "Z", 8)
	p.transposeAdd()
	p.sdot4(false)
	p.sdot4(true)
	p.transpose8x8F64()
	writeFile("pack_amd64.s", p.Bytes())

	var w bytes.Buffer
	w.WriteString("// Code generated by gen_asm.go; DO NOT EDIT.\n\n//go:build amd64\n\n#include \"textflag.h\"\n\n")
	for _, k := range []kern{
		{"sgemmAVX512x14x32", 14, 2, 64, 4, "Z", 32},
		{"dgemmAVX512x14x16", 14, 2, 64, 8, "Z", 32},
		{"sgemmAVX2x6x16", 6, 2, 32, 4, "Y", 16},
		{"dgemmAVX2x6x8", 6, 2, 32, 8, "Y", 16},
	} {
		k.emit(&w)
	}
	writeFile("gemm_amd64.s", w.Bytes())

	var v asm
	v.L("// Code generated by gen_asm.go; DO NOT EDIT.\n\n//go:build amd64\n\n#include \"textflag.h\"\n")
	v.L("// AVX2 B-panel packers (float32, and bf16 widened exactly in registers)")
	v.L("// the matrix-vector product in the portable kernel's summation order, and")
	v.L("// the float32 -> float64 accumulation of the Hessian tiles.\n")
	v.transpose8AVX2(true)
	v.transpose8AVX2(false)
	v.dot4AVX2("dot4AVX2", false)
	v.dot4AVX2("dot4BF16AVX2", true)
	v.addF32ToF64("addF32ToF64AVX2", "Y", 4)
	writeFile("avx2_amd64.s", v.Bytes())

	var d asm
	d.L("// Code generated by gen_asm.go; DO NOT EDIT.\n\n//go:build amd64\n\n#include \"textflag.h\"\n")
	d.L("// AVX512-BF16: the bf16 dot-product GEMM micro-kernel (VDPBF16PS, which")
	d.L("// Go's assembler lacks, encoded as bytes) and its rounding packer.\n")
	d.dotBF16Kernel()
	d.roundTransBF16()
	writeFile("dotbf16_amd64.s", d.Bytes())

	var e asm
	e.L("// Code generated by gen_asm.go; DO NOT EDIT.\n\n//go:build amd64\n\n#include \"textflag.h\"\n")
	e.L("// GELU's float64 erf on AVX-512 and AVX2+FMA, math.Erf and math.Exp")
	e.L("// replayed lane by lane.\n")
	c := e.geluTable()
	e.geluErf(c, true)
	e.geluErf(c, false)
	writeFile("gelu_amd64.s", e.Bytes())
}
