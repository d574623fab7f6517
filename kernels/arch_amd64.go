package kernels

import (
	"math"

	"golang.org/x/sys/cpu"
)

//go:generate go run gen_asm.go

// Assembly micro-kernels (gemm_amd64.s): C[mr x nr] += A-panel * B-panel
// with ldc in elements. They must only run when the CPU has the features.

//go:noescape
func sgemmAVX512x14x32(k int, a, b, c *float32, ldc int)

//go:noescape
func dgemmAVX512x14x16(k int, a, b, c *float64, ldc int)

//go:noescape
func sgemmAVX2x6x16(k int, a, b, c *float32, ldc int)

//go:noescape
func dgemmAVX2x6x8(k int, a, b, c *float64, ldc int)

// asmKernel wraps an assembly micro-kernel, checking the slice bounds it
// relies on so a driver bug panics instead of corrupting memory.
func asmKernel[T float](mr, nr int, f func(k int, a, b, c *T, ldc int)) func(k int, a, b, c []T, ldc int) {
	return func(k int, a, b, c []T, ldc int) {
		_ = a[k*mr-1]
		_ = b[k*nr-1]
		_ = c[(mr-1)*ldc+nr-1]
		f(k, &a[0], &b[0], &c[0], ldc)
	}
}

var (
	avx512Sgemm = &microKernel[float32]{name: "avx512-14x32", mr: 14, nr: 32, kc: 384, mc: 560, nc: 256,
		fn: asmKernel(14, 32, sgemmAVX512x14x32), packA: packANormalAVX512, packB: packBTransAVX512}
	avx512Dgemm = &microKernel[float64]{name: "avx512-14x16", mr: 14, nr: 16, kc: 256, mc: 168, nc: 256,
		fn: asmKernel(14, 16, dgemmAVX512x14x16), packA: packANormalF64AVX512, packB: packBTransF64AVX512}
	avx2Sgemm = &microKernel[float32]{name: "avx2-6x16", mr: 6, nr: 16, kc: 256, mc: 96, nc: 512,
		fn: asmKernel(6, 16, sgemmAVX2x6x16), packB: packBTransAVX2}
	avx2Dgemm = &microKernel[float64]{name: "avx2-6x8", mr: 6, nr: 8, kc: 256, mc: 96, nc: 256,
		fn: asmKernel(6, 8, dgemmAVX2x6x8)}
)

func init() {
	if envFamily >= familyAVX2 && cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		sgemmAll = append(sgemmAll, avx2Sgemm)
		dgemmAll = append(dgemmAll, avx2Dgemm)
		sgemmKern, dgemmKern = avx2Sgemm, avx2Dgemm
		packBBF16 = packBBF16AVX2
		matVecRows = matVecRowsAVX2
		matVecRowsBF16 = matVecRowsBF16AVX2
		addF32ToF64 = addF32ToF64Asm(addF32ToF64AVX2)
		if !goFusesMulAdd {
			geluKern = geluKernel{"avx2 replay of math.Erf and math.Exp, 4 lanes", geluBlocksAsm(4, geluErfAVX2)}
		}
	}
	// KMOVB in the float64 transpose needs AVX512DQ (every AVX-512 CPU
	// since Skylake-SP has it).
	if envFamily >= familyAVX512 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ {
		addF32ToF64 = addF32ToF64Asm(addF32ToF64AVX512)
		transposeAdd = transposeAddAVX512
		mirror8 = mirror8AVX512
		if !goFusesMulAdd {
			geluKern = geluKernel{"avx512 replay of math.Erf and math.Exp, 8 lanes", geluBlocksAsm(8, geluErfAVX512)}
		}
		matVecRows = matVecRowsAVX512
		matVecRowsBF16 = matVecRowsBF16AVX512
		dot = dotAVX512
		sgemmAll = append(sgemmAll, avx512Sgemm)
		dgemmAll = append(dgemmAll, avx512Dgemm)
		sgemmKern, dgemmKern = avx512Sgemm, avx512Dgemm
	}
	// parseFamily refused avx512bf16 on a CPU without the unit.
	if envFamily == familyAVX512BF16 && envErr == nil {
		useDotBF16()
	}
}

//go:noescape
func transpose16x16AVX512(src *float32, lds int, dst *float32, ldd int, mask uint16)

// packBTransAVX512 is packB for nr = 32 and a transposed B (B(p,j) at
// data[j*ld+p], the NT case): full 16x16 blocks go through the AVX-512
// transpose, the ragged rest through the generic packer.
func packBTransAVX512(dst []float32, b operand[float32], p0, kb, j0, cols, nr int) {
	if !b.trans && nr == 32 {
		packBNormal32(dst, b, p0, kb, j0, cols)
		return
	}
	if !b.trans || nr != 32 {
		packB(dst, b, p0, kb, j0, cols, nr)
		return
	}
	kFull := kb &^ 15
	for q := 0; q*nr < cols; q++ {
		base := j0 + q*nr
		if cols-q*nr < nr || kFull == 0 {
			packB(dst[q*kb*nr:], b, p0, kb, base, min(nr, cols-q*nr), nr)
			continue
		}
		d := dst[q*kb*nr : (q+1)*kb*nr]
		_ = b.data[(base+nr-1)*b.ld+p0+kb-1]
		for p := 0; p < kFull; p += 16 {
			transpose16x16AVX512(&b.data[base*b.ld+p0+p], b.ld, &d[p*nr], nr, 0xFFFF)
			transpose16x16AVX512(&b.data[(base+16)*b.ld+p0+p], b.ld, &d[p*nr+16], nr, 0xFFFF)
		}
		for c := range nr {
			src := b.data[(base+c)*b.ld+p0+kFull : (base+c)*b.ld+p0+kb]
			for p, v := range src {
				d[(kFull+p)*nr+c] = v
			}
		}
	}
}

// packANormalAVX512 is packA for mr = 14, alpha = 1 and a row-major A:
// each panel is transposed 16 rows at a time (two rows past the panel are
// read, when they exist in the slice, and masked off).
func packANormalAVX512(dst []float32, a operand[float32], i0, rows, k, mr int, alpha float32) {
	if a.trans || mr != 14 || alpha != 1 {
		packA(dst, a, i0, rows, k, mr, alpha)
		return
	}
	kFull := k &^ 15
	for q := 0; q*mr < rows; q++ {
		base := i0 + q*mr
		if rows-q*mr < mr || kFull == 0 || (base+15)*a.ld+k > len(a.data) {
			packA(dst[q*k*mr:], a, base, min(mr, rows-q*mr), k, mr, alpha)
			continue
		}
		d := dst[q*k*mr : (q+1)*k*mr]
		for p := 0; p < kFull; p += 16 {
			transpose16x16AVX512(&a.data[base*a.ld+p], a.ld, &d[p*mr], mr, 0x3FFF)
		}
		for r := range mr {
			src := a.data[(base+r)*a.ld+kFull : (base+r)*a.ld+k]
			for p, v := range src {
				d[(kFull+p)*mr+r] = v
			}
		}
	}
}

//go:noescape
func addF32ToF64AVX512(dst *float64, src *float32, n int)

//go:noescape
func addF32ToF64AVX2(dst *float64, src *float32, n int)

// addF32ToF64Asm wraps an assembly dst[i] += float64(src[i]), checking the
// bounds it relies on.
func addF32ToF64Asm(f func(dst *float64, src *float32, n int)) func(dst []float64, src []float32) {
	return func(dst []float64, src []float32) {
		if len(src) > 0 {
			_ = dst[len(src)-1]
			f(&dst[0], &src[0], len(src))
		}
	}
}

//go:noescape
func transposeAddF32ToF64AVX512(dst *float64, ldd int, src *float32, lds int)

// transposeAddAVX512 is transposeAddGo with 16x16 assembly tiles.
func transposeAddAVX512(dst []float64, ldd int, src []float32, lds, rows, cols int) {
	r16, c16 := rows&^15, cols&^15
	if r16 > 0 && c16 > 0 {
		_ = dst[(c16-1)*ldd+r16-1]
		_ = src[(r16-1)*lds+c16-1]
		for j := 0; j < c16; j += 16 {
			for r := 0; r < r16; r += 16 {
				transposeAddF32ToF64AVX512(&dst[j*ldd+r], ldd, &src[r*lds+j], lds)
			}
		}
	}
	if c16 < cols {
		transposeAddGo(dst[c16*ldd:], ldd, src[c16:], lds, rows, cols-c16)
	}
	if r16 < rows && c16 > 0 {
		transposeAddGo(dst[r16:], ldd, src[r16*lds:], lds, rows-r16, c16)
	}
}

//go:noescape
func sdot4AVX512(b *float32, ldb int, x *float32, k int, y *float32)

//go:noescape
func sdot4BF16AVX512(b *uint16, ldb int, x *float32, k int, y *float32)

// matVecRowsAVX512 is matVecRows with four rows per assembly call; the
// k%16 tail is summed in Go.
func matVecRowsAVX512(y, b, x []float32, k int) { matVecRows16(y, b, x, k) }

// matVecRowsBF16AVX512 is matVecRowsAVX512 on bf16 rows, widened exactly
// as they are loaded: the same sums as the widened float32 rows, bit for
// bit, from half the bytes.
func matVecRowsBF16AVX512(y []float32, b []uint16, x []float32, k int) { matVecRows16(y, b, x, k) }

// matVecRows16 runs the 4-row AVX-512 dot kernel for T over the rows of y
// (its sums over k &^ 15 values), adding each row's k%16 tail summed by
// dotGo. The last len(y)%4 rows run alone through the same kernel (ldb =
// 0: all four "rows" are the one row, only y[0] is kept), so a row's sum
// never depends on its place in y. The kernels are called directly (no
// function values), so nothing here escapes to the heap.
func matVecRows16[T float32 | uint16](y []float32, b []T, x []float32, k int) {
	k16 := k &^ 15
	j := 0
	if k16 > 0 {
		_ = x[k16-1]
		for ; j+4 <= len(y); j += 4 {
			_ = b[(j+3)*k+k16-1]
			sdot4Of(&b[j*k], k, &x[0], k16, &y[j])
			for r := range 4 {
				y[j+r] += dotTail(b[(j+r)*k+k16:(j+r+1)*k], x[k16:k])
			}
		}
	}
	for ; j < len(y); j++ {
		var one [4]float32
		if k16 > 0 {
			_ = b[j*k+k16-1]
			sdot4Of(&b[j*k], 0, &x[0], k16, &one[0])
		}
		y[j] = one[0] + dotTail(b[j*k+k16:(j+1)*k], x[k16:k])
	}
}

// sdot4Of is sdot4AVX512 or sdot4BF16AVX512, by the rows' type.
func sdot4Of[T float32 | uint16](b *T, ldb int, x *float32, k int, y *float32) {
	switch p := any(b).(type) {
	case *float32:
		sdot4AVX512(p, ldb, x, k, y)
	case *uint16:
		sdot4BF16AVX512(p, ldb, x, k, y)
	}
}

// dotTail is dotGo of a row's last k%16 values (bf16 widened exactly).
func dotTail[T float32 | uint16](s []T, x []float32) float32 {
	switch s := any(s).(type) {
	case []float32:
		return dotGo(s, x)
	case []uint16:
		var w [16]float32
		WidenBF16(w[:len(s)], s)
		return dotGo(w[:len(s)], x)
	}
	return 0
}

// dotAVX512 is Dot with the 16-aligned bulk in assembly, summed in the
// order of one row of matVecRowsAVX512 (one row of the 4-row kernel would
// waste three; it runs on a 1-row view instead), so it equals every row
// of it bit for bit.
func dotAVX512(a, b []float32) float32 {
	n16 := len(a) &^ 15
	if n16 == 0 {
		return dotGo(a, b)
	}
	var y [4]float32
	// ldb = 0: all four "rows" are a; only y[0] is used.
	sdot4AVX512(&a[0], 0, &b[0], n16, &y[0])
	return y[0] + dotGo(a[n16:], b[n16:len(a)])
}

//go:noescape
func transpose8x8F64AVX512(src *float64, lds int, dst *float64, ldd int, mask uint8, alpha float64)

//go:noescape
func geluErfAVX512(x *float32, n int) (done int)

//go:noescape
func geluErfAVX2(x *float32, n int) (done int)

// geluBlocksAsm wraps a GELU kernel that takes blocks of lanes values.
func geluBlocksAsm(lanes int, f func(x *float32, n int) int) func([]float32) int {
	return func(x []float32) int {
		if len(x) < lanes {
			return 0
		}
		return f(&x[0], len(x)/lanes)
	}
}

// mirror8AVX512 is mirror8 as one 8x8 assembly transpose (times 1,
// exact).
func mirror8AVX512(a []float64, n, i, j int) {
	_ = a[(i+7)*n+j+7]
	_ = a[(j+7)*n+i+7]
	transpose8x8F64AVX512(&a[i*n+j], n, &a[j*n+i], n, 0xFF, 1)
}

// packBTransF64AVX512 is packB for float64, nr = 16 and a transposed B,
// using 8x8 assembly transposes for the full blocks.
func packBTransF64AVX512(dst []float64, b operand[float64], p0, kb, j0, cols, nr int) {
	if !b.trans && nr == 16 {
		packBNormal16(dst, b, p0, kb, j0, cols)
		return
	}
	if !b.trans || nr != 16 {
		packB(dst, b, p0, kb, j0, cols, nr)
		return
	}
	kFull := kb &^ 7
	for q := 0; q*nr < cols; q++ {
		base := j0 + q*nr
		if cols-q*nr < nr || kFull == 0 {
			packB(dst[q*kb*nr:], b, p0, kb, base, min(nr, cols-q*nr), nr)
			continue
		}
		d := dst[q*kb*nr : (q+1)*kb*nr]
		_ = b.data[(base+nr-1)*b.ld+p0+kb-1]
		for p := 0; p < kFull; p += 8 {
			transpose8x8F64AVX512(&b.data[base*b.ld+p0+p], b.ld, &d[p*nr], nr, 0xFF, 1)
			transpose8x8F64AVX512(&b.data[(base+8)*b.ld+p0+p], b.ld, &d[p*nr+8], nr, 0xFF, 1)
		}
		for c := range nr {
			src := b.data[(base+c)*b.ld+p0+kFull : (base+c)*b.ld+p0+kb]
			for p, v := range src {
				d[(kFull+p)*nr+c] = v
			}
		}
	}
}

// packANormalF64AVX512 is packA for float64, mr = 14 and a row-major A:
// each panel is transposed 8 rows at a time (the second block reads two
// rows past the panel, when they exist in the slice, and masks them off).
func packANormalF64AVX512(dst []float64, a operand[float64], i0, rows, k, mr int, alpha float64) {
	if a.trans || mr != 14 {
		packA(dst, a, i0, rows, k, mr, alpha)
		return
	}
	kFull := k &^ 7
	for q := 0; q*mr < rows; q++ {
		base := i0 + q*mr
		if rows-q*mr < mr || kFull == 0 || (base+15)*a.ld+k > len(a.data) {
			packA(dst[q*k*mr:], a, base, min(mr, rows-q*mr), k, mr, alpha)
			continue
		}
		d := dst[q*k*mr : (q+1)*k*mr]
		for p := 0; p < kFull; p += 8 {
			transpose8x8F64AVX512(&a.data[base*a.ld+p], a.ld, &d[p*mr], mr, 0xFF, alpha)
			transpose8x8F64AVX512(&a.data[(base+8)*a.ld+p], a.ld, &d[p*mr+8], mr, 0x3F, alpha)
		}
		for r := range mr {
			src := a.data[(base+r)*a.ld+kFull : (base+r)*a.ld+k]
			for p, v := range src {
				d[(kFull+p)*mr+r] = alpha * v
			}
		}
	}
}

//go:noescape
func widenTransBF16x8AVX2(src *uint16, lds int, dst *float32, ldd int, k8 int)

//go:noescape
func dot4AVX2(b *float32, ldb int, x *float32, k8 int, acc *float32)

//go:noescape
func dot4BF16AVX2(b *uint16, ldb int, x *float32, k8 int, acc *float32)

//go:noescape
func transposeF32x8AVX2(src *float32, lds int, dst *float32, ldd int, k8 int)

// packBBF16AVX2 is packBBF16 for the AVX2 kernel's nr = 16: each full
// panel is two 8-row assembly widen-and-transposes.
func packBBF16AVX2(dst []float32, b []uint16, ld, p0, kb, j0, cols, nr int) {
	if nr != 16 || kb < 8 {
		packBBF16Go(dst, b, ld, p0, kb, j0, cols, nr)
		return
	}
	packBTrans16(dst, b, ld, p0, kb, j0, cols, widenTransBF16x8AVX2,
		func(v uint16) float32 { return math.Float32frombits(uint32(v) << 16) },
		func(d []float32, j, c int) { packBBF16Go(d, b, ld, p0, kb, j, c, nr) })
}

// packBTransAVX2 is packB for the AVX2 float32 kernel: a transposed B
// (the NT case: weights [n, k]) goes through the 8-row assembly transpose.
func packBTransAVX2(dst []float32, b operand[float32], p0, kb, j0, cols, nr int) {
	if !b.trans || nr != 16 || kb < 8 {
		packB(dst, b, p0, kb, j0, cols, nr)
		return
	}
	packBTrans16(dst, b.data, b.ld, p0, kb, j0, cols, transposeF32x8AVX2,
		func(v float32) float32 { return v },
		func(d []float32, j, c int) { packB(d, b, p0, kb, j, c, nr) })
}

// packBTrans16 packs columns [j0, j0+cols) of a transposed B (B(p,j) =
// src[j*ld+p], rows p0..p0+kb-1) into nr = 16 panels: full panels as two
// calls of the 8-row assembly transpose tr8 over k &^ 7, the k%8 tail
// through val, a ragged last panel through rest(dst, j, cols).
func packBTrans16[T float32 | uint16](dst []float32, src []T, ld, p0, kb, j0, cols int,
	tr8 func(src *T, lds int, dst *float32, ldd int, k8 int), val func(T) float32, rest func(dst []float32, j, cols int)) {
	const nr = 16
	k8 := kb &^ 7
	for q := 0; q*nr < cols; q++ {
		base := j0 + q*nr
		if cols-q*nr < nr {
			rest(dst[q*kb*nr:], base, cols-q*nr)
			continue
		}
		d := dst[q*kb*nr : (q+1)*kb*nr]
		_ = src[(base+nr-1)*ld+p0+kb-1]
		tr8(&src[base*ld+p0], ld, &d[0], nr, k8)
		tr8(&src[(base+8)*ld+p0], ld, &d[8], nr, k8)
		for c := range nr {
			row := src[(base+c)*ld+p0+k8 : (base+c)*ld+p0+kb]
			for p, v := range row {
				d[(k8+p)*nr+c] = val(v)
			}
		}
	}
}

// matVecRowsAVX2 is matVecRowsGo four rows per assembly call, in dotGo's
// order (bit-identical results, vector speed).
func matVecRowsAVX2(y, b, x []float32, k int) {
	j := matVecRows4(y, b, x, k, dot4AVX2, func(_ []float32, s []float32) []float32 { return s })
	for ; j < len(y); j++ {
		y[j] = dotGo(b[j*k:(j+1)*k], x)
	}
}

// matVecRowsBF16AVX2 is matVecRowsAVX2 on bf16 rows, widened in registers.
func matVecRowsBF16AVX2(y []float32, b []uint16, x []float32, k int) {
	j := matVecRows4(y, b, x, k, dot4BF16AVX2, func(buf []float32, s []uint16) []float32 {
		WidenBF16(buf[:len(s)], s)
		return buf[:len(s)]
	})
	if j < len(y) {
		matVecRowsBF16Widen(y[j:], b[j*k:], x, k)
	}
}

// matVecRows4 runs a 4-row dot kernel over the rows of y in groups of
// four (its lane sums over k &^ 7 values), finishing each row with its
// k%8 tail as float32 (tail widens it into an 8-value buffer when needed).
// It returns how many rows it did.
func matVecRows4[T float32 | uint16](y []float32, b []T, x []float32, k int,
	dot4 func(b *T, ldb int, x *float32, k8 int, acc *float32), tail func(buf []float32, s []T) []float32) int {
	k8 := k &^ 7
	var acc [4][8]float32
	var buf [8]float32
	j := 0
	for ; j+4 <= len(y) && k8 > 0; j += 4 {
		_ = b[(j+3)*k+k8-1]
		_ = x[k8-1]
		dot4(&b[j*k], k, &x[0], k8, &acc[0][0])
		for r := range 4 {
			y[j+r] = finishDot(&acc[r], tail(buf[:], b[(j+r)*k+k8:(j+r+1)*k]), x[k8:k])
		}
	}
	return j
}
