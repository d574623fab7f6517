// Package kernels owns the hot numeric kernels of sparkconv: the fp32 GEMMs
// and matrix-vector products of the reference forward, the float64
// calibration Hessian accumulation (X^T X), and the float64 Cholesky family
// GPTQ needs (factor, triangular inverse, inverse, upper factor of the
// inverse), plus a few element-wise helpers (RMSNorm, Softmax, GELU, ...).
//
// All matrices are dense row-major slices. GEMMs use a packed, cache-blocked
// driver around a register-tiled micro-kernel; on amd64 the micro-kernels are
// Go assembly (AVX-512 or AVX2+FMA, chosen at run time from
// golang.org/x/sys/cpu), elsewhere a portable pure-Go kernel is used. Work is
// spread over GOMAXPROCS goroutines.
package kernels
