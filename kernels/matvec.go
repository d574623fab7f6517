package kernels

// MatVecNT computes y[n] = B[n,k] * x[k] (the decode step, M = 1). Rows of B
// are spread over the cores; the work is memory bound. It overwrites y.
func MatVecNT(y, b, x []float32, n, k int) {
	checkLen("MatVecNT", "y", y, n)
	checkLen("MatVecNT", "b", b, n*k)
	checkLen("MatVecNT", "x", x, k)
	x = x[:k]
	// At least ~64 KiB of B per worker, or spawning costs more than it saves.
	grain := max(1, (1<<14)/max(k, 1))
	parallelGrain(n, grain, func(lo, hi int) {
		matVecRows(y[lo:hi], b[lo*k:hi*k], x, k)
	})
}

// matVecRows is the serial kernel: y[j] = dot(b[j*k:(j+1)*k], x)
// (assembly on amd64 when available).
var matVecRows = matVecRowsGo

func matVecRowsGo(y, b, x []float32, k int) {
	for j := range y {
		y[j] = dotGo(b[j*k:(j+1)*k], x[:k])
	}
}
