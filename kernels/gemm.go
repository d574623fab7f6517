package kernels

import (
	"math/bits"
	"sync"
)

// float is the element type of the generic GEMM driver.
type float interface{ ~float32 | ~float64 }

// operand is a dense matrix operand of a GEMM. Element (r, c) is
// data[r*ld+c], or data[c*ld+r] when trans is set. For the left operand A
// (m x k) r is the row i and c the reduction index p; for the right operand
// B (k x n) r is p and c the column j.
type operand[T float] struct {
	data  []T
	ld    int
	trans bool
}

// microKernel is a register-tiled kernel and the cache blocking that suits
// it. fn adds the mr x nr product of a packed A micro-panel (k steps of mr
// values) and a packed B micro-panel (k steps of nr values) into C, whose
// rows are ldc elements apart.
type microKernel[T float] struct {
	name   string
	mr, nr int
	kc     int // reduction block (packed B panel kc x nr should sit in L1)
	mc     int // rows of A per L2 block, a multiple of mr
	nc     int // columns per task, a multiple of nr
	fn     func(k int, a, b, c []T, ldc int)
	// Optional faster packers (same contract as packA / packB).
	packA func(dst []T, a operand[T], i0, rows, k, mr int, alpha T)
	packB func(dst []T, b operand[T], p0, kb, j0, cols, nr int)
	// packed, when set, is the right operand B already packed by packB
	// (see PackedNT): the reduction block from pc starts at
	// packed[pc*npad], its panels kb*nr apart; the driver's B operand is
	// then unused.
	packed []T
	npad   int
}

func (kern *microKernel[T]) packA2(dst []T, a operand[T], i0, rows, k int, alpha T) {
	if kern.packA != nil {
		kern.packA(dst, a, i0, rows, k, kern.mr, alpha)
		return
	}
	packA(dst, a, i0, rows, k, kern.mr, alpha)
}

func (kern *microKernel[T]) packB2(dst []T, b operand[T], p0, kb, j0, cols int) {
	if kern.packB != nil {
		kern.packB(dst, b, p0, kb, j0, cols, kern.nr)
		return
	}
	packB(dst, b, p0, kb, j0, cols, kern.nr)
}

// gemm computes C = alpha*A*B (+ C when acc) for A m x k, B k x n and C
// m x n with row stride ldc, on all cores. A is packed completely before C
// is written, so A may overlap C (B may not).
func gemm[T float](m, n, k int, a, b operand[T], c []T, ldc int, alpha T, acc bool, kern *microKernel[T]) {
	if gemmEmpty(m, n, k, c, ldc, acc) {
		return
	}
	mr := kern.mr
	panels := (m + mr - 1) / mr
	pa := getBuf[T](panels * mr * k)
	defer putBuf(pa)
	flops := 2 * m * n * k
	if flops < 1<<20 {
		kern.packA2(*pa, a, 0, m, k, alpha)
		bb := getBuf[T](bBufLen(kern, n))
		gemmCore(m, n, k, *pa, mr*k, b, 0, c, ldc, acc, kern, *bb)
		putBuf(bb)
		return
	}
	parallelGrain(panels, 4, func(lo, hi int) {
		kern.packA2((*pa)[lo*mr*k:], a, lo*mr, min(hi*mr, m)-lo*mr, k, alpha)
	})
	// Split N into chunks of at most nc columns, at least two per worker
	// when N allows (so a busy core does not stall the rest); split M only
	// when N is too narrow, since every M chunk packs B again.
	mh, nw, mTasks, nTasks := splitTasks(m, n, mr, kern.nr, kern.nc)
	workers := numWorkers(mTasks * nTasks)
	bufs := make([]*[]T, workers)
	for w := range bufs {
		bufs[w] = getBuf[T](bBufLen(kern, nw))
	}
	parallelTasks(mTasks*nTasks, func(w, t int) {
		i0 := (t / nTasks) * mh
		j0 := (t % nTasks) * nw
		mb, nb := min(mh, m-i0), min(nw, n-j0)
		gemmCore(mb, nb, k, (*pa)[(i0/mr)*mr*k:], mr*k, b, j0, c[i0*ldc+j0:], ldc, acc, kern, *bufs[w])
	})
	for _, bb := range bufs {
		putBuf(bb)
	}
}

func bBufLen[T float](kern *microKernel[T], n int) int {
	return kern.kc * ((n + kern.nr - 1) / kern.nr * kern.nr)
}

// gemmCore is the serial blocked loop nest for an m x n block of C. pa holds
// A packed by packA: panel q (rows q*mr...) starts at pa[q*pstride], its k
// steps of mr values contiguous (pstride >= k*mr lets a caller use a k
// sub-range of a wider packing). B columns start at j0. bbuf receives packed
// B panels.
func gemmCore[T float](m, n, k int, pa []T, pstride int, b operand[T], j0 int, c []T, ldc int, acc bool, kern *microKernel[T], bbuf []T) {
	mr, nr := kern.mr, kern.nr
	if !acc {
		zeroRows(c, m, n, ldc)
	}
	var tmp [16 * 64]T
	for pc := 0; pc < k; pc += kern.kc {
		kb := min(kern.kc, k-pc)
		bb := bbuf
		if kern.packed != nil {
			bb = kern.packed[pc*kern.npad+(j0/nr)*kb*nr:] // j0 is a multiple of nr
		} else {
			kern.packB2(bbuf, b, pc, kb, j0, n)
		}
		for ic := 0; ic < m; ic += kern.mc {
			iEnd := min(ic+kern.mc, m)
			for jr := 0; jr < n; jr += nr {
				nb := min(nr, n-jr)
				bp := bb[(jr/nr)*kb*nr:]
				for ir := ic; ir < iEnd; ir += mr {
					rb := min(mr, m-ir)
					kern.tile(kb, pa[(ir/mr)*pstride+pc*mr:], bp, c[ir*ldc+jr:], ldc, rb, nb, &tmp)
				}
			}
		}
	}
}

// tile adds the rb x nb (at most mr x nr) product of packed panels ap and
// bp, kb steps deep, into c (rows ldc apart); a partial tile goes through
// tmp.
func (kern *microKernel[T]) tile(kb int, ap, bp, c []T, ldc, rb, nb int, tmp *[16 * 64]T) {
	mr, nr := kern.mr, kern.nr
	if rb == mr && nb == nr {
		kern.fn(kb, ap, bp, c, ldc)
		return
	}
	// A ragged tile runs on a copy of C's rows in tmp and is copied back:
	// the kernel adds its sums into C after the k loop, so the result is
	// the full tile's bit for bit. tmp's other cells hold earlier tiles'
	// leftovers, which the kernel reads and nobody uses.
	t := tmp[:mr*nr]
	for r := range rb {
		copy(t[r*nr:r*nr+nb], c[r*ldc:r*ldc+nb])
	}
	kern.fn(kb, ap, bp, t, nr)
	for r := range rb {
		copy(c[r*ldc:r*ldc+nb], t[r*nr:r*nr+nb])
	}
}

func zeroRows[T float](c []T, m, n, ldc int) {
	for i := range m {
		clear(c[i*ldc : i*ldc+n])
	}
}

// packA copies rows [i0, i0+rows) of alpha*A into dst as panels of mr rows:
// panel q holds, for p = 0..k-1, the mr values A(i0+q*mr+r, p). Rows past
// the end are zero.
func packA[T float](dst []T, a operand[T], i0, rows, k, mr int, alpha T) {
	for q := 0; q*mr < rows; q++ {
		d := dst[q*k*mr : (q+1)*k*mr]
		rb := min(mr, rows-q*mr)
		base := i0 + q*mr
		if a.trans {
			for p := range k {
				src := a.data[p*a.ld+base : p*a.ld+base+rb]
				dd := d[p*mr : p*mr+mr]
				for r, v := range src {
					dd[r] = alpha * v
				}
				clear(dd[rb:])
			}
			continue
		}
		for r := range rb {
			src := a.data[(base+r)*a.ld : (base+r)*a.ld+k]
			for p, v := range src {
				d[p*mr+r] = alpha * v
			}
		}
		for r := rb; r < mr; r++ {
			for p := range k {
				d[p*mr+r] = 0
			}
		}
	}
}

// packB copies B(p0:p0+kb, j0:j0+cols) into dst as panels of nr columns:
// panel q holds, for p = 0..kb-1, the nr values B(p0+p, j0+q*nr+c). Columns
// past the end are zero.
func packB[T float](dst []T, b operand[T], p0, kb, j0, cols, nr int) {
	for q := 0; q*nr < cols; q++ {
		d := dst[q*kb*nr : (q+1)*kb*nr]
		cb := min(nr, cols-q*nr)
		base := j0 + q*nr
		if !b.trans {
			for p := range kb {
				row := (p0 + p) * b.ld
				copy(d[p*nr:p*nr+cb], b.data[row+base:row+base+cb])
				clear(d[p*nr+cb : p*nr+nr])
			}
			continue
		}
		for c := range cb {
			src := b.data[(base+c)*b.ld+p0 : (base+c)*b.ld+p0+kb]
			for p, v := range src {
				d[p*nr+c] = v
			}
		}
		for c := cb; c < nr; c++ {
			for p := range kb {
				d[p*nr+c] = 0
			}
		}
	}
}

// Scratch pools by power-of-two size class, so the differently sized
// operands of consecutive calls (the layers' q/k/v, o, gate/up and down
// projections) each find a buffer to reuse instead of allocating.
var (
	pool32 [64]sync.Pool
	pool64 [64]sync.Pool
)

// getBuf returns a scratch slice of length n (contents unspecified).
func getBuf[T float](n int) *[]T {
	c := bits.Len(uint(max(n, 1) - 1))
	p := poolFor[T](c)
	if v, ok := p.Get().(*[]T); ok {
		*v = (*v)[:n]
		return v
	}
	s := make([]T, n, 1<<c)
	return &s
}

// putBuf returns a buffer from getBuf to its pool.
func putBuf[T float](b *[]T) {
	c := bits.Len(uint(cap(*b))) - 1
	poolFor[T](c).Put(b)
}

func poolFor[T float](class int) *sync.Pool {
	var z T
	if _, ok := any(z).(float32); ok {
		return &pool32[class]
	}
	return &pool64[class]
}

// gemmEmpty handles the products with nothing to multiply: an empty C, or
// k = 0 (C becomes zero unless accumulated). It reports whether it did.
func gemmEmpty[T float](m, n, k int, c []T, ldc int, acc bool) bool {
	if m > 0 && n > 0 && k <= 0 && !acc {
		zeroRows(c, m, n, ldc)
	}
	return m <= 0 || n <= 0 || k <= 0
}

// gemmSerial is gemm on the calling goroutine only, for callers that
// parallelize over their own tasks. It walks C in column chunks of kern.nc
// so the packed B panel stays cache sized.
func gemmSerial[T float](m, n, k int, a, b operand[T], c []T, ldc int, alpha T, acc bool, kern *microKernel[T]) {
	if gemmEmpty(m, n, k, c, ldc, acc) {
		return
	}
	mr := kern.mr
	pa := getBuf[T]((m + mr - 1) / mr * mr * k)
	kern.packA2(*pa, a, 0, m, k, alpha)
	bb := getBuf[T](bBufLen(kern, min(n, kern.nc)))
	for j0 := 0; j0 < n; j0 += kern.nc {
		gemmCore(m, min(kern.nc, n-j0), k, *pa, mr*k, b, j0, c[j0:], ldc, acc, kern, *bb)
	}
	putBuf(bb)
	putBuf(pa)
}

// packBNormal32 is packB for a row-major float32 B with nr = 32: each
// panel row moves as one fixed-size array (inlined vector moves, not a
// memmove call per 128 bytes).
func packBNormal32(dst []float32, b operand[float32], p0, kb, j0, cols int) {
	const nr = 32
	for q := 0; q*nr < cols; q++ {
		base := j0 + q*nr
		if cols-q*nr < nr {
			packB(dst[q*kb*nr:], b, p0, kb, base, cols-q*nr, nr)
			continue
		}
		d := dst[q*kb*nr : (q+1)*kb*nr]
		for p := range kb {
			*(*[nr]float32)(d[p*nr:]) = *(*[nr]float32)(b.data[(p0+p)*b.ld+base:])
		}
	}
}

// packBNormal16 is packBNormal32 for float64 with nr = 16.
func packBNormal16(dst []float64, b operand[float64], p0, kb, j0, cols int) {
	const nr = 16
	for q := 0; q*nr < cols; q++ {
		base := j0 + q*nr
		if cols-q*nr < nr {
			packB(dst[q*kb*nr:], b, p0, kb, base, cols-q*nr, nr)
			continue
		}
		d := dst[q*kb*nr : (q+1)*kb*nr]
		for p := range kb {
			*(*[nr]float64)(d[p*nr:]) = *(*[nr]float64)(b.data[(p0+p)*b.ld+base:])
		}
	}
}
