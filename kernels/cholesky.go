package kernels

import (
	"fmt"
	"math"
)

// cholBlock is the panel width of the blocked factorizations.
const cholBlock = 256

// Cholesky factors the symmetric positive definite n x n matrix a in place
// as a = L L^T with L lower triangular. Only the lower triangle of a is
// read; on return it holds L and the strict upper triangle is zero. It
// fails, naming the pivot, when a is not (numerically) positive definite;
// a is then partly overwritten.
func Cholesky(a []float64, n int) error {
	checkLen("Cholesky", "a", a, n*n)
	kern := dgemmKern
	w := getBuf[float64](cholBlock * cholBlock)
	defer putBuf(w)
	for j0 := 0; j0 < n; j0 += cholBlock {
		jb := min(cholBlock, n-j0)
		if err := potrfRec(a, n, j0, jb, kern); err != nil {
			return err
		}
		s := j0 + jb
		if s == n {
			break
		}
		// A21 := A21 * L11^-T, a GEMM against the explicit inverse (gemm
		// packs A before writing C, so A21 can be updated in place).
		inv := (*w)[:jb*jb]
		triInvRec(inv, jb, a, n, j0, jb, kern)
		a21 := a[s*n+j0:]
		gemm(n-s, jb, jb, operand[float64]{a21, n, false}, operand[float64]{inv, jb, true}, a21, n, 1, false, kern)
		lowerUpdate(a, n, s, j0, jb, kern)
	}
	zeroUpper(a, n)
	return nil
}

// lowerUpdate subtracts A21 A21^T from the trailing matrix a[s:n, s:n],
// where A21 = a[s:n, j0:j0+jb], on every micro-tile that reaches the lower
// triangle (tiles straddling the diagonal also write upper elements, which
// nothing reads). A21 is packed once, as both operands.
func lowerUpdate(a []float64, n, s, j0, jb int, kern *microKernel[float64]) {
	r := n - s
	mr, nr := kern.mr, kern.nr
	rowPanels, colPanels := (r+mr-1)/mr, (r+nr-1)/nr
	pa := getBuf[float64](rowPanels * mr * jb)
	pb := getBuf[float64](colPanels * nr * jb)
	defer putBuf(pa)
	defer putBuf(pb)
	a21 := a[s*n+j0:]
	parallelGrain(colPanels, 8, func(lo, hi int) {
		kern.packB2((*pb)[lo*nr*jb:], operand[float64]{a21, n, true}, 0, jb, lo*nr, min(hi*nr, r)-lo*nr)
	})
	// The A-side panels come from the packed B (contiguous) rather than
	// from a21's strided rows a second time.
	parallelGrain(rowPanels, 8, func(lo, hi int) {
		repackBAsA((*pa)[lo*mr*jb:], *pb, lo*mr, min(hi*mr, r)-lo*mr, jb, mr, nr, -1)
	})
	const group = 4 // row panels per task
	tasks := (rowPanels + group - 1) / group
	parallelTasks(tasks, func(_, t int) {
		var tmp [16 * 64]float64
		g := tasks - 1 - t // bottom rows have the most tiles: start them first
		p0, p1 := g*group, min((g+1)*group, rowPanels)
		rowEnd := min(p1*mr, r)
		for jp := 0; jp*nr < rowEnd; jp++ {
			j := jp * nr
			cb := min(nr, r-j)
			bp := (*pb)[jp*nr*jb:]
			for ip := p0; ip < p1; ip++ {
				i := ip * mr
				rb := min(mr, r-i)
				if j > i+rb-1 {
					continue // entirely above the diagonal
				}
				kern.tile(jb, (*pa)[ip*mr*jb:], bp, a[(s+i)*n+s+j:], n, rb, cb, &tmp)
			}
		}
	})
}

// repackBAsA writes alpha * rows [i0, i0+rows) of M in packA's layout
// (panels of mr rows) from pb, which holds M^T in packB's layout: M[i][p]
// is pb[(i/nr)*nr*k + p*nr + i%nr]. Rows past the end are zero.
func repackBAsA(dst, pb []float64, i0, rows, k, mr, nr int, alpha float64) {
	var off [64]int
	for q := 0; q*mr < rows; q++ {
		rb := min(mr, rows-q*mr)
		for r := range rb {
			i := i0 + q*mr + r
			off[r] = (i/nr)*nr*k + i%nr
		}
		d := dst[q*k*mr : (q+1)*k*mr]
		for p := range k {
			dp := d[p*mr : p*mr+mr]
			for r := range rb {
				dp[r] = alpha * pb[off[r]+p*nr]
			}
			clear(dp[rb:])
		}
	}
}

// potrfUnblocked factors the jb x jb diagonal block at (j0, j0) of the
// n x n matrix a, whose earlier panels were already subtracted.
func potrfUnblocked(a []float64, n, j0, jb int) error {
	for j := range jb {
		rj := a[(j0+j)*n+j0 : (j0+j)*n+j0+j]
		d := a[(j0+j)*n+j0+j] - dot64(rj, rj)
		if !(d > 0) || math.IsInf(d, 0) {
			return fmt.Errorf("kernels: cholesky: matrix is not positive definite: pivot %d of %d is %g", j0+j, n, d)
		}
		ljj := math.Sqrt(d)
		a[(j0+j)*n+j0+j] = ljj
		inv := 1 / ljj
		for i := j + 1; i < jb; i++ {
			ri := a[(j0+i)*n+j0 : (j0+i)*n+j0+j]
			a[(j0+i)*n+j0+j] = (a[(j0+i)*n+j0+j] - dot64(ri, rj)) * inv
		}
	}
	return nil
}

// recBase is the block size below which the recursive diagonal-block
// routines switch to scalar loops.
const recBase = 32

// potrfRec factors the jb x jb diagonal block at (j0, j0) of the n x n
// matrix a (earlier panels already subtracted), recursively: halves are
// joined by GEMMs so the serial part of the blocked Cholesky is fast too.
func potrfRec(a []float64, n, j0, jb int, kern *microKernel[float64]) error {
	if jb <= recBase {
		return potrfUnblocked(a, n, j0, jb)
	}
	h := jb / 2
	if err := potrfRec(a, n, j0, h, kern); err != nil {
		return err
	}
	inv := getBuf[float64](h * h)
	defer putBuf(inv)
	triInvRec(*inv, h, a, n, j0, h, kern)
	a21 := a[(j0+h)*n+j0:]
	gemmSerial(jb-h, h, h, operand[float64]{a21, n, false}, operand[float64]{*inv, h, true}, a21, n, 1, false, kern)
	gemmSerial(jb-h, jb-h, h, operand[float64]{a21, n, false}, operand[float64]{a21, n, true}, a[(j0+h)*n+j0+h:], n, -1, true, kern)
	return potrfRec(a, n, j0+h, jb-h, kern)
}

// triInvRec writes into dst (jb x jb, row stride ldd) the inverse of the
// lower triangular jb x jb block at (j0, j0) of the n x n matrix a; the
// strict upper triangle of dst becomes zero. Recursive on halves:
// X21 = -X22 * L21 * X11.
func triInvRec(dst []float64, ldd int, a []float64, n, j0, jb int, kern *microKernel[float64]) {
	if jb <= recBase {
		triInvLowerBlock(dst, ldd, a, n, j0, jb)
		return
	}
	h := jb / 2
	triInvRec(dst, ldd, a, n, j0, h, kern)
	triInvRec(dst[h*ldd+h:], ldd, a, n, j0+h, jb-h, kern)
	for i := range h {
		clear(dst[i*ldd+h : i*ldd+jb])
	}
	t := getBuf[float64]((jb - h) * h)
	defer putBuf(t)
	gemmSerial(jb-h, h, h, operand[float64]{a[(j0+h)*n+j0:], n, false}, operand[float64]{dst, ldd, false}, *t, h, 1, false, kern)
	gemmSerial(jb-h, h, jb-h, operand[float64]{dst[h*ldd+h:], ldd, false}, operand[float64]{*t, h, false}, dst[h*ldd:], ldd, -1, false, kern)
}

// triInvLowerBlock writes into dst (jb x jb, row stride ldd) the inverse of
// the lower triangular jb x jb block at (j0, j0) of the n x n matrix a. The
// strict upper triangle of dst is zero.
func triInvLowerBlock(dst []float64, ldd int, a []float64, n, j0, jb int) {
	for i := range jb {
		clear(dst[i*ldd : i*ldd+jb])
	}
	for i := range jb {
		li := a[(j0+i)*n+j0 : (j0+i)*n+j0+i+1]
		xi := dst[i*ldd : i*ldd+i+1]
		inv := 1 / li[i]
		// X[i][:] = -(1/L[i][i]) * sum_{p<i} L[i][p] X[p][:]
		for p := range i {
			if lp := li[p]; lp != 0 {
				axpy64(-lp*inv, dst[p*ldd:p*ldd+p+1], xi)
			}
		}
		xi[i] = inv
	}
}

// TriInverseLower replaces the lower triangular n x n matrix l (for example
// a Cholesky factor) by its inverse, which is lower triangular too. The
// strict upper triangle is ignored on input and zero on output. It fails if
// a diagonal element is zero.
func TriInverseLower(l []float64, n int) error {
	checkLen("TriInverseLower", "l", l, n*n)
	for i := range n {
		if l[i*n+i] == 0 || math.IsNaN(l[i*n+i]) {
			return fmt.Errorf("kernels: triangular inverse: diagonal element %d of %d is %g", i, n, l[i*n+i])
		}
	}
	zeroUpper(l, n)
	kern := dgemmKern
	w := getBuf[float64](cholBlock * cholBlock)
	defer putBuf(w)
	// Scratch sized for the last block row, so no step allocates.
	t := getBuf[float64](cholBlock * n)
	defer putBuf(t)
	pa := getBuf[float64]((cholBlock + kern.mr - 1) / kern.mr * kern.mr * n)
	defer putBuf(pa)
	// Row block I of X = L^-1, left of the diagonal, is
	// -X_II * L[I, 0:I] * X[0:I, 0:I]; the rows above are already X.
	for i0 := 0; i0 < n; i0 += cholBlock {
		ib := min(cholBlock, n-i0)
		inv := (*w)[:ib*ib]
		triInvRec(inv, ib, l, n, i0, ib, kern)
		if i0 > 0 {
			triRightMul(*t, *pa, l, n, i0, ib, kern)
			gemm(ib, i0, ib, operand[float64]{inv, ib, false}, operand[float64]{*t, i0, false}, l[i0*n:], n, -1, false, kern)
		}
		for i := range ib {
			copy(l[(i0+i)*n+i0:(i0+i)*n+i0+ib], inv[i*ib:(i+1)*ib])
		}
	}
	return nil
}

// triRightMul sets t (ib x i0, using pa as packing scratch) = L[i0:i0+ib, 0:i0] * X[0:i0, 0:i0], where
// rows 0..i0 of l already hold the lower triangular X: column block J of
// the product needs only the k range [J, i0).
func triRightMul(t, pa, l []float64, n, i0, ib int, kern *microKernel[float64]) {
	mr := kern.mr
	panels := (ib + mr - 1) / mr
	parallelGrain(panels, 2, func(lo, hi int) {
		kern.packA2(pa[lo*mr*i0:], operand[float64]{l[i0*n:], n, false}, lo*mr, min(hi*mr, ib)-lo*mr, i0, 1)
	})
	jw := kern.nc
	tasks := (i0 + jw - 1) / jw
	bufs := make([]*[]float64, numWorkers(tasks))
	for i := range bufs {
		bufs[i] = getBuf[float64](bBufLen(kern, jw))
	}
	parallelTasks(tasks, func(w, task int) {
		j0 := task * jw
		gemmCore(ib, min(jw, i0-j0), i0-j0, pa[j0*mr:], mr*i0,
			operand[float64]{l[j0*n:], n, false}, j0, t[j0:], i0, false, kern, *bufs[w])
	})
	for _, b := range bufs {
		putBuf(b)
	}
}

// CholeskyInverse takes the Cholesky factor L of A (lower, as Cholesky
// leaves it) and overwrites it with the full symmetric A^-1 = L^-T L^-1
// (torch.cholesky_inverse).
func CholeskyInverse(l []float64, n int) error {
	checkLen("CholeskyInverse", "l", l, n*n)
	if err := TriInverseLower(l, n); err != nil {
		return fmt.Errorf("kernels: cholesky inverse: %w", err)
	}
	// Row block i of X^T X (columns up to the block's end) depends only on
	// rows >= i of X, so ascending blocks can be overwritten in place.
	const rows = cholBlock
	t := getBuf[float64](rows * n)
	defer putBuf(t)
	for i0 := 0; i0 < n; i0 += rows {
		ib := min(rows, n-i0)
		w := i0 + ib
		gemm(ib, w, n-i0,
			operand[float64]{l[i0*n+i0:], n, true},
			operand[float64]{l[i0*n:], n, false},
			*t, w, 1, false, dgemmKern)
		for r := range ib {
			copy(l[(i0+r)*n:(i0+r)*n+w], (*t)[r*w:(r+1)*w])
		}
	}
	mirrorLower(l, n)
	return nil
}

// CholeskyUpperInverse overwrites the symmetric positive definite matrix h
// with the upper triangular U for which U^T U = h^-1, the factor GPTQ uses:
// torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)),
// upper=True). It needs one Cholesky and one triangular inverse: with P the
// exchange matrix, P h P = L L^T gives U = P L^-1 P. The strict lower
// triangle is zero on return.
func CholeskyUpperInverse(h []float64, n int) error {
	checkLen("CholeskyUpperInverse", "h", h, n*n)
	hs := h[:n*n]
	reverse(hs) // P h P: element (i,j) moves to (n-1-i, n-1-j)
	if err := Cholesky(hs, n); err != nil {
		return fmt.Errorf("kernels: upper Cholesky of the inverse (on the reversed matrix): %w", err)
	}
	if err := TriInverseLower(hs, n); err != nil {
		return fmt.Errorf("kernels: upper Cholesky of the inverse: %w", err)
	}
	reverse(hs)
	return nil
}

// reverse reverses a in place across the workers.
func reverse(a []float64) {
	n := len(a)
	parallelGrain(n/2, 1<<16, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			a[i], a[n-1-i] = a[n-1-i], a[i]
		}
	})
}

func zeroUpper(a []float64, n int) {
	parallelGrain(n, 256, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			clear(a[i*n+i+1 : (i+1)*n])
		}
	})
}

// mirrorLower copies the strict lower triangle onto the upper one.
func mirrorLower(a []float64, n int) {
	const tile = 64
	tiles := (n + tile - 1) / tile
	// Tile row bi writes the upper-triangle columns of tile bi only.
	parallelTasks(tiles, func(_, task int) {
		bi := tiles - 1 - task
		i0, i1 := bi*tile, min((bi+1)*tile, n)
		for bj := 0; bj <= bi; bj++ {
			mirrorTile(a, n, i0, i1, bj*tile, min((bj+1)*tile, n))
		}
	})
}

// mirrorTile copies a[i][j] to a[j][i] for i0 <= i < i1, j0 <= j < min(i,
// j1): whole 8x8 blocks below the diagonal through mirror8 (16 rows, so
// 16 pages, touched per block instead of one a column), the rest element
// by element.
func mirrorTile(a []float64, n, i0, i1, j0, j1 int) {
	i8 := i0
	for ; i8+8 <= i1; i8 += 8 {
		j := j0
		for ; j+8 <= min(j1, i8); j += 8 {
			mirror8(a, n, i8, j)
		}
		mirrorRows(a, n, i8, i8+8, j, j1)
	}
	mirrorRows(a, n, i8, i1, j0, j1)
}

// mirrorRows is mirrorTile element by element.
func mirrorRows(a []float64, n, i0, i1, j0, j1 int) {
	for i := i0; i < i1; i++ {
		for j := j0; j < min(j1, i); j++ {
			a[j*n+i] = a[i*n+j]
		}
	}
}

// mirror8 copies the 8x8 block of the n x n matrix a at (i, j) onto (j,
// i), transposed (j+8 <= i) (assembly on amd64 when available).
var mirror8 = mirror8Go

func mirror8Go(a []float64, n, i, j int) {
	for r := range 8 {
		src := a[(i+r)*n+j : (i+r)*n+j+8]
		for c, v := range src {
			a[(j+c)*n+i+r] = v
		}
	}
}

func dot64(a, b []float64) float64 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func axpy64(alpha float64, x, y []float64) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}
