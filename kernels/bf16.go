package kernels

import "math"

// bf16 weights: a linear's weight kept as the checkpoint stores it (bfloat16
// bits, the top half of a float32), multiplied by float32 activations. The
// widening to float32 is exact and happens inside the kernels (the GEMM's
// B-panel packing, the matrix-vector product's loads), so no float32 copy
// of the weight exists; the products and sums are the float32 kernels', in
// the same order, so the results are bit for bit those of MatMulNT and
// MatVecNT on the widened weight.

// MatMulNTBF16 computes C[m,n] = A[m,k] * B[n,k]^T with B in bf16 (raw
// bits, row-major [n,k]). It overwrites c. m == 1 takes the MatVecNTBF16
// path.
func MatMulNTBF16(c, a []float32, b []uint16, m, n, k int) {
	checkLen("MatMulNTBF16", "c", c, m*n)
	checkLen("MatMulNTBF16", "a", a, m*k)
	checkLen("MatMulNTBF16", "b", b, n*k)
	if m == 1 {
		MatVecNTBF16(c, b, a, n, k)
		return
	}
	kern := bf16Kernel(sgemmKern, b)
	gemm(m, n, k, operand[float32]{a, k, false}, operand[float32]{nil, k, true}, c, n, 1, false, kern)
}

// bf16Kernel is kern with its B packer reading the bf16 bits b in place of
// the (empty) float32 operand: the driver only reads B through packB.
func bf16Kernel(kern *microKernel[float32], b []uint16) *microKernel[float32] {
	k := *kern
	k.packB = func(dst []float32, op operand[float32], p0, kb, j0, cols, nr int) {
		packBBF16(dst, b, op.ld, p0, kb, j0, cols, nr)
	}
	return &k
}

// MatVecNTBF16 computes y[n] = B[n,k] * x[k] with B in bf16 (the decode
// step). It overwrites y.
func MatVecNTBF16(y []float32, b []uint16, x []float32, n, k int) {
	checkLen("MatVecNTBF16", "y", y, n)
	checkLen("MatVecNTBF16", "b", b, n*k)
	checkLen("MatVecNTBF16", "x", x, k)
	x = x[:k]
	// As MatVecNT: at least ~64 KiB of B per worker.
	grain := max(1, (1<<15)/max(k, 1))
	parallelGrain(n, grain, func(lo, hi int) {
		matVecRowsBF16(y[lo:hi], b[lo*k:hi*k], x, k)
	})
}

// WidenBF16 writes the float32 values of the bf16 bits src into dst
// (exact: a bf16 is the top half of a float32).
func WidenBF16(dst []float32, src []uint16) {
	checkLen("WidenBF16", "dst", dst, len(src))
	dst = dst[:len(src)]
	_, done := WidenAbsMaxBF16(dst, src)
	for i := done; i < len(src); i++ {
		dst[i] = math.Float32frombits(uint32(src[i]) << 16)
	}
}

// packBBF16 is packB for a transposed bf16 B (B(p,j) = b[j*ld+p]); the
// active version (assembly on amd64 with AVX2).
var packBBF16 = packBBF16Go

func packBBF16Go(dst []float32, b []uint16, ld, p0, kb, j0, cols, nr int) {
	for q := 0; q*nr < cols; q++ {
		d := dst[q*kb*nr : (q+1)*kb*nr]
		cb := min(nr, cols-q*nr)
		base := j0 + q*nr
		for c := range cb {
			src := b[(base+c)*ld+p0 : (base+c)*ld+p0+kb]
			for p, v := range src {
				d[p*nr+c] = math.Float32frombits(uint32(v) << 16)
			}
		}
		for c := cb; c < nr; c++ {
			for p := range kb {
				d[p*nr+c] = 0
			}
		}
	}
}

// matVecRowsBF16 is the serial bf16 kernel (fused assembly on amd64 with
// AVX2; elsewhere the rows are widened a few at a time into a scratch
// buffer and handed to matVecRows, the float32 kernel, so the sums are
// always those of the float32 path).
var matVecRowsBF16 = matVecRowsBF16Widen

func matVecRowsBF16Widen(y []float32, b []uint16, x []float32, k int) {
	const rows = 8
	buf := getBuf[float32](rows * k)
	defer putBuf(buf)
	for j := 0; j < len(y); j += rows {
		r := min(rows, len(y)-j)
		w := (*buf)[:r*k]
		WidenBF16(w, b[j*k:(j+r)*k])
		matVecRows(y[j:j+r], w, x, k)
	}
}

// finishDot completes a dotGo-order sum from its eight lane sums s and
// the tail a*b past the last multiple of 8 (added to lane 0, as dotGo
// does).
func finishDot(s *[8]float32, a, b []float32) float32 {
	s0 := s[0]
	b = b[:len(a)]
	for i, v := range a {
		s0 += v * b[i]
	}
	return ((s0 + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
}
