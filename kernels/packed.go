package kernels

import "fmt"

// PackedNT is a linear layer's weight W [n, k] packed once into the
// panels the family's linear product (LinearNT) would pack on every call,
// for a caller that multiplies the same weight by many activation blocks
// (GPTQ's calibration forward: 16 chunks a stage). LinearNTPacked(c, a, p,
// m) gives LinearNT(c, a, w, m, n, k) bit for bit. It holds a copy: it
// stays what W was when packed.
type PackedNT struct {
	N, K int
	f32  []float32 // float32 families: sgemmKern's B panels
	dot  []uint16  // avx512bf16: the dot kernel's B panels
	kern *microKernel[float32]
}

// PackNT packs the float32 weight w [n, k].
func PackNT(w []float32, n, k int) *PackedNT {
	checkLen("PackNT", "w", w, n*k)
	return packNT(n, k, dotWeight{f32: w, ld: k}, sgemmKern, operand[float32]{w, k, true})
}

// PackNTBF16 packs the bf16 weight w [n, k] (raw bits).
func PackNTBF16(w []uint16, n, k int) *PackedNT {
	checkLen("PackNTBF16", "w", w, n*k)
	return packNT(n, k, dotWeight{bits: w, ld: k}, bf16Kernel(sgemmKern, w), operand[float32]{nil, k, true})
}

func packNT(n, k int, dw dotWeight, kern *microKernel[float32], b operand[float32]) *PackedNT {
	p := &PackedNT{N: n, K: k, kern: sgemmKern}
	if bf16Linears {
		kp, npad := (k+1)/2, (n+dotNR-1)/dotNR*dotNR
		p.dot = make([]uint16, kp*npad*2)
		blocks := (kp + dotKCP - 1) / dotKCP
		parallelGrain(blocks*npad/dotNR, 4, func(lo, hi int) {
			for t := lo; t < hi; t++ {
				pc, j := t/(npad/dotNR)*dotKCP, t%(npad/dotNR)*dotNR
				kb := min(dotKCP, kp-pc)
				dotKern.packB(p.dot[pc*npad*2+j*kb*2:], dw, k, pc, kb, j, min(dotNR, n-j))
			}
		})
		return p
	}
	nr := kern.nr
	npad := (n + nr - 1) / nr * nr
	p.f32 = make([]float32, k*npad)
	blocks := (k + kern.kc - 1) / kern.kc
	parallelGrain(blocks*npad/nr, 4, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			pc, j := t/(npad/nr)*kern.kc, t%(npad/nr)*nr
			kb := min(kern.kc, k-pc)
			kern.packB2(p.f32[pc*npad+j*kb:], b, pc, kb, j, min(nr, n-j))
		}
	})
	return p
}

// LinearNTPacked computes C[m, n] = A[m, k] * W^T for the weight p packed,
// as LinearNT does (m >= 2: for one row use LinearNT on W itself). It
// overwrites c. The kernels must be those p was packed for.
func LinearNTPacked(c, a []float32, p *PackedNT, m int) {
	n, k := p.N, p.K
	checkLen("LinearNTPacked", "c", c, m*n)
	checkLen("LinearNTPacked", "a", a, m*k)
	if m < 2 || p.kern != sgemmKern || (p.dot != nil) != bf16Linears {
		panic(fmt.Sprintf("kernels: LinearNTPacked: m = %d, packed for %s, running %s", m, p.kern.name, sgemmKern.name))
	}
	if p.dot != nil {
		gemmDotBF16(m, n, k, a, dotWeight{ld: k, packed: p.dot, npad: (n + dotNR - 1) / dotNR * dotNR}, c)
		return
	}
	kern := *sgemmKern
	kern.packed, kern.npad = p.f32, (n+kern.nr-1)/kern.nr*kern.nr
	gemm(m, n, k, operand[float32]{a, k, false}, operand[float32]{nil, k, true}, c, n, 1, false, &kern)
}
