package kernels

import "unsafe"

// The avx512bf16 family's assembly (dotbf16_amd64.s, from gen_asm.go).

//go:noescape
func dotBF16AVX512x14x32(kp int, a, b *uint16, c *float32, ldc int)

//go:noescape
func roundTransBF16AVX512(src *float32, lds int, dst *uint16, ldd int, mask uint16)

// dotKernAVX512 is the AVX512-BF16 kernel with its assembly packers.
var dotKernAVX512 = dotKernel{fn: dotBF16AVX512, packA: packADotAVX512, packB: packBDotAVX512}

// useDotBF16 installs the avx512bf16 family's linear products.
func useDotBF16() {
	dotKern, bf16Linears = dotKernAVX512, true
}

// dotBF16AVX512 checks the slice bounds the assembly relies on.
func dotBF16AVX512(kp int, a, b []uint16, c []float32, ldc int) {
	if kp <= 0 {
		return
	}
	_ = a[kp*dotMR*2-1]
	_ = b[kp*dotNR*2-1]
	_ = c[(dotMR-1)*ldc+dotNR-1]
	dotBF16AVX512x14x32(kp, &a[0], &b[0], &c[0], ldc)
}

// packADotAVX512 is packADotGo with full panels rounded and transposed 16
// pairs at a time in assembly (two rows past the panel are read, when the
// slice has them, and masked off).
func packADotAVX512(dst []uint16, a []float32, lda, i0, rows, k int) {
	kp, full := (k+1)/2, (k/2)&^15
	for q := 0; q*dotMR < rows; q++ {
		base := i0 + q*dotMR
		d := dst[q*dotMR*2*kp : (q+1)*dotMR*2*kp]
		if rows-q*dotMR < dotMR || full == 0 || (base+15)*lda+2*full > len(a) {
			packADotGo(d, a, lda, base, min(dotMR, rows-q*dotMR), k)
			continue
		}
		for p := 0; p < full; p += 16 {
			roundTransBF16AVX512(&a[base*lda+2*p], lda, &d[p*dotMR*2], dotMR, 0x3FFF)
		}
		for r := range dotMR {
			row := a[(base+r)*lda : (base+r)*lda+k]
			for e := 2 * full; e < k; e++ {
				d[(e/2*dotMR+r)*2+e%2] = RoundBF16(row[e])
			}
			if k%2 == 1 {
				d[(k/2*dotMR+r)*2+1] = 0
			}
		}
	}
}

// packBDotAVX512 is packBDotGo with full panels in assembly, 16 pairs of
// 16 columns at a time: float32 weights rounded and transposed, bf16
// weights transposed as dwords (a pair of bf16 is one dword).
func packBDotAVX512(dst []uint16, w dotWeight, k, p0, kb, j0, cols int) {
	full := (min(p0+kb, k/2) - p0) &^ 15
	for q := 0; q*dotNR < cols; q++ {
		base := j0 + q*dotNR
		d := dst[q*kb*dotNR*2 : (q+1)*kb*dotNR*2]
		if cols-q*dotNR < dotNR || full <= 0 || (w.bits != nil && w.ld%2 != 0) {
			packBDotGo(d, w, k, p0, kb, base, min(dotNR, cols-q*dotNR))
			continue
		}
		last := (base+dotNR-1)*w.ld + 2*(p0+full) - 1
		if w.bits != nil {
			_ = w.bits[last]
		} else {
			_ = w.f32[last]
		}
		for p := 0; p < full; p += 16 {
			for jh := 0; jh < dotNR; jh += 16 {
				at := (base+jh)*w.ld + 2*(p0+p)
				out := &d[(p*dotNR+jh)*2]
				if w.bits != nil {
					transpose16x16AVX512((*float32)(unsafe.Pointer(&w.bits[at])), w.ld/2, (*float32)(unsafe.Pointer(out)), dotNR, 0xFFFF)
				} else {
					roundTransBF16AVX512(&w.f32[at], w.ld, out, dotNR, 0xFFFF)
				}
			}
		}
		end := min(k, 2*(p0+kb))
		for c := range dotNR {
			for e := 2 * (p0 + full); e < end; e++ {
				d[((e/2-p0)*dotNR+c)*2+e%2] = w.at(base+c, e)
			}
			if end%2 == 1 {
				d[((end/2-p0)*dotNR+c)*2+1] = 0
			}
		}
	}
}
