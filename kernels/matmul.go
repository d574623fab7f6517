package kernels

import "fmt"

// MatMulNT computes C[m,n] = A[m,k] * B[n,k]^T: activations times a linear
// weight stored [out,in]. It overwrites c. m == 1 takes the MatVecNT path.
func MatMulNT(c, a, b []float32, m, n, k int) {
	checkLen("MatMulNT", "c", c, m*n)
	checkLen("MatMulNT", "a", a, m*k)
	checkLen("MatMulNT", "b", b, n*k)
	if m == 1 {
		MatVecNT(c, b, a, n, k)
		return
	}
	gemm(m, n, k, operand[float32]{a, k, false}, operand[float32]{b, k, true}, c, n, 1, false, sgemmKern)
}

// MatMulNN computes C[m,n] = A[m,k] * B[k,n]. It overwrites c.
func MatMulNN(c, a, b []float32, m, n, k int) {
	checkLen("MatMulNN", "c", c, m*n)
	checkLen("MatMulNN", "a", a, m*k)
	checkLen("MatMulNN", "b", b, k*n)
	if m == 1 {
		vecMatNN(c[:n], a[:k], b, n, k)
		return
	}
	gemm(m, n, k, operand[float32]{a, k, false}, operand[float32]{b, n, false}, c, n, 1, false, sgemmKern)
}

// checkLen panics (a caller bug, like an index out of range) when a slice is
// shorter than its shape needs.
func checkLen[T any](fn, name string, s []T, need int) {
	if len(s) < need {
		panic(fmt.Sprintf("kernels: %s: len(%s) = %d, shape needs %d", fn, name, len(s), need))
	}
}

// vecMatNN computes c[n] = a[k] * B[k,n] as a sum of scaled rows of B,
// split over column ranges when B is large.
func vecMatNN(c, a, b []float32, n, k int) {
	grain := max(256, (1<<16)/max(k, 1))
	parallelGrain(n, grain, func(lo, hi int) {
		out := c[lo:hi]
		clear(out)
		for p, ap := range a {
			Axpy(ap, b[p*n+lo:p*n+hi], out)
		}
	})
}

// Sgemm is the BLAS-style float32 GEMM on row-major strided matrices:
// C = alpha*op(A)*op(B) + beta*C with op(A) m x k and op(B) k x n. op(A) is
// A (rows lda apart) or, with transA, the transpose of A stored k x m;
// likewise op(B) with transB (B stored n x k). With beta == 0, C is not
// read (NaNs in it do not propagate). Sub-matrices are addressed by slicing
// at their first element and passing the parent's stride, e.g. one
// attention head's columns of a [T, heads*dim] activation.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkStrided("Sgemm", "a", len(a), transA, m, k, lda)
	checkStrided("Sgemm", "b", len(b), transB, k, n, ldb)
	checkStrided("Sgemm", "c", len(c), false, m, n, ldc)
	acc := prepareBeta(c, m, n, ldc, beta)
	gemm(m, n, k, operand[float32]{a, lda, transA}, operand[float32]{b, ldb, transB}, c, ldc, alpha, acc, sgemmKern)
}

// Dgemm is Sgemm in float64.
func Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	checkStrided("Dgemm", "a", len(a), transA, m, k, lda)
	checkStrided("Dgemm", "b", len(b), transB, k, n, ldb)
	checkStrided("Dgemm", "c", len(c), false, m, n, ldc)
	acc := prepareBeta(c, m, n, ldc, beta)
	gemm(m, n, k, operand[float64]{a, lda, transA}, operand[float64]{b, ldb, transB}, c, ldc, alpha, acc, dgemmKern)
}

// prepareBeta applies beta to C and says whether the GEMM must accumulate.
func prepareBeta[T float](c []T, m, n, ldc int, beta T) bool {
	switch {
	case beta == 0 || m <= 0 || n <= 0:
		return false
	case beta == 1:
		return true
	}
	parallelGrain(m, max(1, 4096/n), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row := c[i*ldc : i*ldc+n]
			for j := range row {
				row[j] *= beta
			}
		}
	})
	return true
}

// checkStrided panics when a rows x cols matrix (stored transposed when
// trans) with leading dimension ld does not fit in length l, or ld is too
// small for its rows.
func checkStrided(fn, name string, l int, trans bool, rows, cols, ld int) {
	if trans {
		rows, cols = cols, rows
	}
	if rows <= 0 || cols <= 0 {
		return
	}
	if ld < cols {
		panic(fmt.Sprintf("kernels: %s: ld%s = %d < %d columns", fn, name, ld, cols))
	}
	if need := (rows-1)*ld + cols; l < need {
		panic(fmt.Sprintf("kernels: %s: len(%s) = %d, shape needs %d", fn, name, l, need))
	}
}
