package kernels

import "testing"

// TestPortable reruns the kernel tests with every pure-Go fallback active,
// so CPUs without AVX are covered here too.
func TestPortable(t *testing.T) {
	restore := usePortable()
	defer restore()
	for name, f := range map[string]func(*testing.T){
		"MatMulNT": TestMatMulNT, "MatMulNN": TestMatMulNN, "MatVecNT": TestMatVecNT,
		"SyrkAccumulate": TestSyrkAccumulate, "Cholesky": TestCholesky,
		"TriInverseLower": TestTriInverseLower, "CholeskyUpperInverse": TestCholeskyUpperInverse,
		"Dot": TestDotAxpyMul,
	} {
		t.Run(name, f)
	}
}
