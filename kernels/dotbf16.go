package kernels

import (
	"math"
	"math/bits"
	"sync"
)

// The avx512bf16 family: the products of a model's linear layers with both
// operands rounded to bf16 (round to nearest even) and multiplied by
// VDPBF16PS (AVX512-BF16), two products per fp32 lane and instruction,
// accumulated in fp32. It serves callers that accept that precision
// (LinearNT, LinearNTBF16: GPTQ's calibration forward); every other
// product of the family is the avx512 family's, bit for bit.
//
// Summation order, which fixes the results: each output is summed over
// blocks of dotKCP reduction pairs; inside a block, from zero, pair by pair
// (the odd element's product added first, then the even one's, each
// addition rounded to fp32: VDPBF16PS's documented order, with bf16 and
// fp32 denormals read as zero and results flushed to zero); the block sums
// are added into the output in order. dotBF16Ref is that order in Go.

// dotMR, dotNR and dotKCP are the micro-kernel's tile (rows, columns) and
// the reduction pairs per block.
const (
	dotMR  = 14
	dotNR  = 32
	dotKCP = 192
)

// bf16Linears is set (amd64 init) when the avx512bf16 family runs: LinearNT
// and LinearNTBF16 then take the bf16 dot-product kernel.
var bf16Linears bool

// LinearNT computes C[m,n] = A[m,k] * W[n,k]^T, the product of a linear
// layer's weight W with activations A, at the precision of the kernel
// family: in the avx512bf16 family both are rounded to bf16 and the
// products summed in fp32 (see the family's order above); in every other
// family, and for m == 1, it is MatMulNT. It overwrites c.
func LinearNT(c, a, w []float32, m, n, k int) {
	if !bf16Linears || m == 1 {
		MatMulNT(c, a, w, m, n, k)
		return
	}
	checkLen("LinearNT", "c", c, m*n)
	checkLen("LinearNT", "a", a, m*k)
	checkLen("LinearNT", "w", w, n*k)
	gemmDotBF16(m, n, k, a, dotWeight{f32: w, ld: k}, c)
}

// LinearNTBF16 is LinearNT with W in bf16 bits (MatMulNTBF16 outside the
// avx512bf16 family).
func LinearNTBF16(c, a []float32, w []uint16, m, n, k int) {
	if !bf16Linears || m == 1 {
		MatMulNTBF16(c, a, w, m, n, k)
		return
	}
	checkLen("LinearNTBF16", "c", c, m*n)
	checkLen("LinearNTBF16", "a", a, m*k)
	checkLen("LinearNTBF16", "w", w, n*k)
	gemmDotBF16(m, n, k, a, dotWeight{bits: w, ld: k}, c)
}

// RoundBF16 returns the bf16 bits nearest f (ties to even); a NaN stays a
// quiet NaN.
func RoundBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7FFFFFFF > 0x7F800000 {
		return uint16(u>>16) | 0x40
	}
	return uint16((u + 0x7FFF + (u>>16)&1) >> 16)
}

// dotWeight is the right operand of the dot-product GEMM: a weight [n, ld]
// in float32 (rounded as it is packed) or in bf16 bits.
type dotWeight struct {
	f32  []float32
	bits []uint16
	ld   int
	// packed holds W already packed by packB (see PackedNT): the block of
	// reduction pairs from pc starts at packed[pc*npad*2], npad the
	// columns rounded up to dotNR.
	packed []uint16
	npad   int
}

// at is the bf16 bits of W[j, p].
func (w dotWeight) at(j, p int) uint16 {
	if w.bits != nil {
		return w.bits[j*w.ld+p]
	}
	return RoundBF16(w.f32[j*w.ld+p])
}

// dotKernel is the bf16 micro-kernel and its packers: fn adds the
// dotMR x dotNR product of a packed A panel and B panel, kp pairs deep,
// into C (rows ldc apart).
type dotKernel struct {
	fn func(kp int, a, b []uint16, c []float32, ldc int)
	// packA writes rows [i0, i0+rows) of a (rows lda apart, k columns),
	// rounded, as panels of dotMR rows: panel q holds for each pair p the
	// dotMR dwords (a[r][2p], a[r][2p+1]), zero past the ends.
	packA func(dst []uint16, a []float32, lda, i0, rows, k int)
	// packB writes columns [j0, j0+cols) of W^T, pairs [p0, p0+kb), as
	// panels of dotNR columns: panel q holds for each pair the dotNR dwords
	// (W[j][2p], W[j][2p+1]), zero past the ends (k is W's columns).
	packB func(dst []uint16, w dotWeight, k, p0, kb, j0, cols int)
}

// dotKern is the active bf16 kernel (amd64 init installs the assembly one).
var dotKern = dotKernel{fn: dotBF16Go, packA: packADotGo, packB: packBDotGo}

// gemmDotBF16 computes C = round(A) * round(W)^T on all cores, with the
// task split of gemm.
func gemmDotBF16(m, n, k int, a []float32, w dotWeight, c []float32) {
	if m <= 0 || n <= 0 {
		return
	}
	kp := (k + 1) / 2
	panels := (m + dotMR - 1) / dotMR
	pstride := dotMR * 2 * kp
	pa := getBuf16(panels * pstride)
	defer putBuf16(pa)
	parallelGrain(panels, 4, func(lo, hi int) {
		dotKern.packA((*pa)[lo*pstride:], a, k, lo*dotMR, min(hi*dotMR, m)-lo*dotMR, k)
	})
	mh, nw, mTasks, nTasks := splitTasks(m, n, dotMR, dotNR, 256)
	bufs := make([]*[]uint16, numWorkers(mTasks*nTasks))
	for i := range bufs {
		bufs[i] = getBuf16(dotKCP * 2 * ((nw + dotNR - 1) / dotNR * dotNR))
	}
	parallelTasks(mTasks*nTasks, func(wk, t int) {
		i0, j0 := (t/nTasks)*mh, (t%nTasks)*nw
		mb, nb := min(mh, m-i0), min(nw, n-j0)
		dotCore(mb, nb, k, (*pa)[(i0/dotMR)*pstride:], pstride, w, j0, c[i0*n+j0:], n, *bufs[wk])
	})
	for _, b := range bufs {
		putBuf16(b)
	}
}

// dotCore is gemmCore for the bf16 kernel: C[mb, nb] (overwritten) from A
// panels pa (pstride apart) and the columns j0.. of W^T, packed here
// dotKCP pairs at a time into bbuf.
func dotCore(mb, nb, k int, pa []uint16, pstride int, w dotWeight, j0 int, c []float32, ldc int, bbuf []uint16) {
	const mc = 40 * dotMR
	zeroRows(c, mb, nb, ldc)
	kp := (k + 1) / 2
	var tmp [dotMR * dotNR]float32
	for pc := 0; pc < kp; pc += dotKCP {
		kb := min(dotKCP, kp-pc)
		bb := bbuf
		if w.packed != nil {
			bb = w.packed[pc*w.npad*2+(j0/dotNR)*kb*dotNR*2:] // j0 is a multiple of dotNR
		} else {
			dotKern.packB(bbuf, w, k, pc, kb, j0, nb)
		}
		for ic := 0; ic < mb; ic += mc {
			for jr := 0; jr < nb; jr += dotNR {
				cb := min(dotNR, nb-jr)
				bp := bb[(jr/dotNR)*kb*dotNR*2:]
				for ir := ic; ir < min(ic+mc, mb); ir += dotMR {
					rb := min(dotMR, mb-ir)
					ap := pa[(ir/dotMR)*pstride+pc*dotMR*2:]
					if rb == dotMR && cb == dotNR {
						dotKern.fn(kb, ap, bp, c[ir*ldc+jr:], ldc)
						continue
					}
					clear(tmp[:])
					dotKern.fn(kb, ap, bp, tmp[:], dotNR)
					for r := range rb {
						dst := c[(ir+r)*ldc+jr : (ir+r)*ldc+jr+cb]
						for j, v := range tmp[r*dotNR : r*dotNR+cb] {
							dst[j] += v
						}
					}
				}
			}
		}
	}
}

// packADotGo is the portable packA of the bf16 kernel.
func packADotGo(dst []uint16, a []float32, lda, i0, rows, k int) {
	kp := (k + 1) / 2
	for q := 0; q*dotMR < rows; q++ {
		d := dst[q*dotMR*2*kp : (q+1)*dotMR*2*kp]
		clear(d)
		for r := range min(dotMR, rows-q*dotMR) {
			row := a[(i0+q*dotMR+r)*lda : (i0+q*dotMR+r)*lda+k]
			for p, v := range row {
				d[(p/2*dotMR+r)*2+p%2] = RoundBF16(v)
			}
		}
	}
}

// packBDotGo is the portable packB of the bf16 kernel.
func packBDotGo(dst []uint16, w dotWeight, k, p0, kb, j0, cols int) {
	for q := 0; q*dotNR < cols; q++ {
		d := dst[q*kb*dotNR*2 : (q+1)*kb*dotNR*2]
		clear(d)
		for c := range min(dotNR, cols-q*dotNR) {
			j := j0 + q*dotNR + c
			for p := 2 * p0; p < min(k, 2*(p0+kb)); p++ {
				d[((p/2-p0)*dotNR+c)*2+p%2] = w.at(j, p)
			}
		}
	}
}

// dotBF16Go is the portable micro-kernel, in VDPBF16PS's order.
func dotBF16Go(kp int, a, b []uint16, c []float32, ldc int) {
	for r := range dotMR {
		for j := range dotNR {
			var s float32
			for p := range kp {
				ai, bi := (p*dotMR+r)*2, (p*dotNR+j)*2
				s = dotPairBF16(s, a[ai], a[ai+1], b[bi], b[bi+1])
			}
			c[r*ldc+j] += s
		}
	}
}

// dotPairBF16 is one VDPBF16PS lane: acc + a1*b1, then + a0*b0, each
// addition rounded to fp32 (the products of two bf16 are exact), bf16 and
// fp32 denormal inputs read as zero and denormal results flushed to zero.
func dotPairBF16(acc float32, a0, a1, b0, b1 uint16) float32 {
	acc = ftz(ftz(acc) + bf16DAZ(a1)*bf16DAZ(b1))
	return ftz(acc + bf16DAZ(a0)*bf16DAZ(b0))
}

// bf16DAZ is the float32 of bf16 bits, a denormal read as zero.
func bf16DAZ(b uint16) float32 {
	if b&0x7F80 == 0 {
		b &= 0x8000
	}
	return math.Float32frombits(uint32(b) << 16)
}

// ftz flushes a denormal float32 to zero (keeping its sign).
func ftz(f float32) float32 {
	if u := math.Float32bits(f); u&0x7F800000 == 0 {
		return math.Float32frombits(u & 0x80000000)
	}
	return f
}

// splitTasks is gemm's split of an m x n product into tasks: column
// chunks of nw (a multiple of nr, at most nc, at least two chunks per
// worker when n allows), and row chunks of mh (a multiple of mr) only when
// n is too narrow to keep every worker busy.
func splitTasks(m, n, mr, nr, nc int) (mh, nw, mTasks, nTasks int) {
	workers := numWorkers(1 << 30)
	panels := (m + mr - 1) / mr
	nPanels := (n + nr - 1) / nr
	nw = min(nc/nr, max(1, nPanels/(2*workers))) * nr
	nTasks = (n + nw - 1) / nw
	mTasks = 1
	if nTasks < 2*workers {
		mTasks = min((2*workers+nTasks-1)/nTasks, panels)
	}
	mh = (panels + mTasks - 1) / mTasks * mr
	return mh, nw, (m + mh - 1) / mh, nTasks
}

// pool16 holds uint16 scratch by power-of-two size class (as getBuf).
var pool16 [64]sync.Pool

func getBuf16(n int) *[]uint16 {
	c := bits.Len(uint(max(n, 1) - 1))
	if v, ok := pool16[c].Get().(*[]uint16); ok {
		*v = (*v)[:n]
		return v
	}
	s := make([]uint16, n, 1<<c)
	return &s
}

func putBuf16(b *[]uint16) { pool16[bits.Len(uint(cap(*b)))-1].Put(b) }
