package kernels

// goKernel2x4 is the portable micro-kernel: C[2x4] += A-panel * B-panel.
// Eight accumulators plus six operands fit amd64's 16 scalar registers
// (a 4x4 tile spills and runs at half the speed).
func goKernel2x4[T float](k int, a, b, c []T, ldc int) {
	var c00, c01, c02, c03, c10, c11, c12, c13 T
	a = a[:2*k]
	b = b[:4*k]
	for p := range k {
		av := a[2*p : 2*p+2 : 2*p+2]
		bv := b[4*p : 4*p+4 : 4*p+4]
		a0, a1 := av[0], av[1]
		b0, b1, b2, b3 := bv[0], bv[1], bv[2], bv[3]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
	}
	r := c[0:4:4]
	r[0], r[1], r[2], r[3] = r[0]+c00, r[1]+c01, r[2]+c02, r[3]+c03
	r = c[ldc : ldc+4 : ldc+4]
	r[0], r[1], r[2], r[3] = r[0]+c10, r[1]+c11, r[2]+c12, r[3]+c13
}

var goSgemm = &microKernel[float32]{name: "go-2x4", mr: 2, nr: 4, kc: 256, mc: 64, nc: 256, fn: goKernel2x4[float32]}
var goDgemm = &microKernel[float64]{name: "go-2x4", mr: 2, nr: 4, kc: 256, mc: 64, nc: 256, fn: goKernel2x4[float64]}

// Active kernels; amd64 init replaces them when the CPU allows. The
// *All lists hold every kernel this CPU can run (tests check each one).
var (
	sgemmKern = goSgemm
	dgemmKern = goDgemm
	sgemmAll  = []*microKernel[float32]{goSgemm}
	dgemmAll  = []*microKernel[float64]{goDgemm}
)

// usePortable switches every kernel to its pure-Go version (for tests of
// the fallbacks on CPUs that have faster ones) and returns the undo.
func usePortable() (restore func()) {
	s, d, mv, dt, af, ta := sgemmKern, dgemmKern, matVecRows, dot, addF32ToF64, transposeAdd
	pb, mb, m8, gk := packBBF16, matVecRowsBF16, mirror8, geluKern
	sgemmKern, dgemmKern, matVecRows, dot, addF32ToF64, transposeAdd = goSgemm, goDgemm, matVecRowsGo, dotGo, addF32ToF64Go, transposeAddGo
	packBBF16, matVecRowsBF16, mirror8, geluKern = packBBF16Go, matVecRowsBF16Widen, mirror8Go, geluPortable
	return func() {
		sgemmKern, dgemmKern, matVecRows, dot, addF32ToF64, transposeAdd = s, d, mv, dt, af, ta
		packBBF16, matVecRowsBF16, mirror8, geluKern = pb, mb, m8, gk
	}
}
