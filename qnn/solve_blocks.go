package qnn

import (
	"fmt"

	"sparkconv/kernels"
)

// SolveDamp is SolveBlocks' damping: the fraction of H's mean diagonal
// added to its diagonal (GPTQ's 0.01).
const SolveDamp = 0.01

// SolveBlocks returns the weight w [k, n] on the LPBQ grid s with its codes
// chosen by GPTQ's solve (Frantar et al., 2022) instead of rounding each
// weight to nearest: the input rows are rounded in order, and each row's
// rounding error is carried into the rows not yet rounded through the
// upper Cholesky factor U of (H + damp mean(diag H) I)^-1, so the later
// codes make up for the earlier ones' error in the MatMul's output on the
// calibration inputs. The grid (channel and integer scales) is s's; only
// the codes change. Every value returned lies on the grid: code * scale in
// float32, which s.Dequantize gives back unchanged, so a converter that
// rounds the returned weights to s's grid reproduces the solved codes.
func SolveBlocks(w []float32, h []float64, s BlockScales, damp float64) ([]float32, error) {
	k, n, nb := s.K, s.N, s.Blocks()
	if len(w) != k*n || len(h) != k*k {
		return nil, fmt.Errorf("solve: %d weights and %d H entries for [%d, %d]", len(w), len(h), k, n)
	}
	u := append([]float64(nil), h...)
	var mean float64
	for i := range k {
		mean += u[i*k+i]
	}
	mean /= float64(k)
	if !(mean > 0) {
		mean = 1
	}
	for i := range k {
		u[i*k+i] += damp * mean
	}
	if err := kernels.CholeskyUpperInverse(u, k); err != nil {
		return nil, fmt.Errorf("solve: the factor of H: %w", err)
	}
	x := make([]float64, k*n)
	for i, v := range w {
		x[i] = float64(v)
	}
	out := make([]float32, k*n)
	carry := make([]float64, n)
	for r := range k {
		b, d := r/s.Block, u[r*k+r]
		for j := range n {
			c := lpbqCode(float32(x[r*n+j]), s.BlockScale(j, b), s.Int[j*nb+b], s.CompressedBW)
			q := float32(c) * s.Scale[j]
			out[r*n+j] = q
			carry[j] = (x[r*n+j] - float64(q)) / d
		}
		rest := k - r - 1
		kernels.Parallel(rest, func(a, z int) {
			for r2 := r + 1 + a; r2 < r+1+z; r2++ {
				f := u[r*k+r2]
				if f == 0 {
					continue
				}
				row := x[r2*n : (r2+1)*n]
				for j := range row {
					row[j] -= f * carry[j]
				}
			}
		})
	}
	return out, nil
}
