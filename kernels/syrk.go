package kernels

import "math"

// syrkChunk is the longest run of tokens summed in float32 before the
// result is added into the float64 matrix.
const syrkChunk = 512

// syrkTileFor is the side of the square H tiles SyrkAccumulate hands to
// its workers: the largest multiple of both micro-kernel sides up to 256,
// so every tile starts on a packed panel boundary.
func syrkTileFor(kern *microKernel[float32]) int {
	l := kern.mr * kern.nr / gcd(kern.mr, kern.nr)
	return max(1, 256/l) * l
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// SyrkAccumulate adds X^T X to H: H[k,k] += X[t,k]^T X[t,k] (the GPTQ
// calibration Hessian of a linear layer's input). The products of each run
// of up to 512 tokens are summed in float32 by the GEMM kernel and then added
// into H in float64. H stays fully symmetric: both triangles are updated.
// In a loop over many chunks, SyrkAccumulateLower followed by one
// SymmetrizeLower is faster (the float64 read-modify-write of H is a large
// part of the cost).
func SyrkAccumulate(h []float64, x []float32, t, k int) {
	checkLen("SyrkAccumulate", "h", h, k*k)
	checkLen("SyrkAccumulate", "x", x, t*k)
	syrkAccumulate(h, x, t, k, true)
}

// SyrkAccumulateLower is SyrkAccumulate updating only the lower triangle
// (diagonal included) of H; the strict upper triangle is left untouched.
// Call SymmetrizeLower once after the last chunk to get the full matrix.
func SyrkAccumulateLower(h []float64, x []float32, t, k int) {
	checkLen("SyrkAccumulateLower", "h", h, k*k)
	checkLen("SyrkAccumulateLower", "x", x, t*k)
	syrkAccumulate(h, x, t, k, false)
}

// SymmetrizeLower copies the strict lower triangle of the n x n matrix a
// onto its upper triangle.
func SymmetrizeLower(a []float64, n int) {
	checkLen("SymmetrizeLower", "a", a, n*n)
	mirrorLower(a, n)
}

func syrkAccumulate(h []float64, x []float32, t, k int, upper bool) {
	if t <= 0 || k <= 0 {
		return
	}
	kern := sgemmKern
	mr, nr, tile := kern.mr, kern.nr, syrkTileFor(kern)
	blocks := (k + tile - 1) / tile
	tiles := blocks * (blocks + 1) / 2 // the lower block triangle
	workers := numWorkers(tiles)
	bufs := make([]*[]float32, workers)
	for w := range bufs {
		bufs[w] = getBuf[float32](min(tile, k) * min(tile, k))
	}
	aPanels, bPanels := (k+mr-1)/mr, (k+nr-1)/nr
	pa := getBuf[float32](aPanels * mr * min(t, syrkChunk))
	pb := getBuf[float32](bPanels * nr * min(t, syrkChunk))
	for t0 := 0; t0 < t; t0 += syrkChunk {
		tc := min(syrkChunk, t-t0)
		xs := x[t0*k : (t0+tc)*k]
		// X^T packed once as A panels and X once as B panels, each tc steps
		// deep: every tile reads its panels from these.
		parallelGrain(aPanels, 8, func(lo, hi int) {
			kern.packA2((*pa)[lo*mr*tc:], operand[float32]{xs, k, true}, lo*mr, min(hi*mr, k)-lo*mr, tc, 1)
		})
		parallelGrain(bPanels, 8, func(lo, hi int) {
			kern.packB2((*pb)[lo*nr*tc:], operand[float32]{xs, k, false}, 0, tc, lo*nr, min(hi*nr, k)-lo*nr)
		})
		parallelTasks(tiles, func(w, task int) {
			bi, bj := triangleIndex(task)
			syrkTileAdd(h, *pa, *pb, tc, k, bi*tile, bj*tile, tile, upper, *bufs[w])
		})
	}
	putBuf(pa)
	putBuf(pb)
	for _, b := range bufs {
		putBuf(b)
	}
}

// triangleIndex maps task = bi*(bi+1)/2 + bj (bj <= bi), row-major over a
// lower triangle, back to (bi, bj).
func triangleIndex(task int) (bi, bj int) {
	bi = int((math.Sqrt(8*float64(task)+1) - 1) / 2)
	for bi*(bi+1)/2 > task {
		bi--
	}
	for (bi+1)*(bi+2)/2 <= task {
		bi++
	}
	return bi, task - bi*(bi+1)/2
}

// syrkTileAdd adds the tile H[i0:i0+ib, j0:j0+jb] (ib, jb up to tile) of X^T X (j0 <= i0) and,
// off the diagonal and when upper is set, its transpose H[j0:j0+jb,
// i0:i0+ib]. Without upper, a diagonal tile adds its lower triangle only
// (micro-tiles wholly above the diagonal are skipped). pa and pb are X^T
// and X packed for the float32 micro-kernel, t steps deep; the kernel's
// reduction blocks (kc) are summed in order, as gemm would.
func syrkTileAdd(h []float64, pa, pb []float32, t, k, i0, j0, tile int, upper bool, buf []float32) {
	kern := sgemmKern
	mr, nr := kern.mr, kern.nr
	ib, jb := min(tile, k-i0), min(tile, k-j0)
	c := buf[:ib*jb]
	clear(c)
	lowerOnly := !upper && i0 == j0
	var tmp [16 * 64]float32
	for pc := 0; pc < t; pc += kern.kc {
		kb := min(kern.kc, t-pc)
		for jr := 0; jr < jb; jr += nr {
			nb := min(nr, jb-jr)
			bp := pb[(j0+jr)/nr*nr*t+pc*nr:]
			for ir := 0; ir < ib; ir += mr {
				rb := min(mr, ib-ir)
				if lowerOnly && jr > ir+rb-1 {
					continue
				}
				kern.tile(kb, pa[(i0+ir)/mr*mr*t+pc*mr:], bp, c[ir*jb+jr:], jb, rb, nb, &tmp)
			}
		}
	}
	for r := range ib {
		w := jb
		if lowerOnly {
			w = r + 1
		}
		addF32ToF64(h[(i0+r)*k+j0:(i0+r)*k+j0+w], c[r*jb:r*jb+w])
	}
	if upper && i0 != j0 {
		transposeAdd(h[j0*k+i0:], k, c, jb, ib, jb)
	}
}

// addF32ToF64 does dst[i] += float64(src[i]) (assembly on amd64 when
// available).
var addF32ToF64 = addF32ToF64Go

func addF32ToF64Go(dst []float64, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] += float64(v)
	}
}

// transposeAdd does dst[j*ldd+r] += float64(src[r*lds+j]) for r < rows,
// j < cols (assembly tiles on amd64 when available).
var transposeAdd = transposeAddGo

func transposeAddGo(dst []float64, ldd int, src []float32, lds, rows, cols int) {
	const tile = 32
	for j0 := 0; j0 < cols; j0 += tile {
		for r0 := 0; r0 < rows; r0 += tile {
			for j := j0; j < min(j0+tile, cols); j++ {
				d := dst[j*ldd+r0 : j*ldd+min(r0+tile, rows)]
				for r := range d {
					d[r] += float64(src[(r0+r)*lds+j])
				}
			}
		}
	}
}
