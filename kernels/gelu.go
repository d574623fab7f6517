package kernels

import "math"

// GELUErf replaces x by the exact GELU 0.5*x*(1+erf(x/sqrt(2))) in place,
// evaluated in float64 with math.Erf. On AVX-512 (AVX2) the finite values
// go 8 (4) at a time through an assembly replay of math.Erf and math.Exp
// (gen_asm.go's geluErf), whose results are the Go expression's bit for
// bit. A GOAMD64=v3 build fuses the Go code's multiply-adds into FMAs, so
// there GELUErf stays in Go (goFusesMulAdd).
func GELUErf(x []float32) {
	for i := 0; i < len(x); {
		i += geluKern.blocks(x[i:])
		// The next 8 values: the tail, or a block holding a NaN or an
		// infinity (and what follows it up to 8).
		for end := min(len(x), i+8); i < end; i++ {
			x[i] = geluGo(x[i])
		}
	}
}

// geluKernel is GELUErf's vector kernel: blocks runs it over whole blocks
// of its lanes (8 on AVX-512, 4 on AVX2) from the start of x, stopping
// before a block holding a NaN or an infinity, and returns how many values
// it wrote.
type geluKernel struct {
	name   string
	blocks func(x []float32) int
}

// geluPortable writes no value: GELUErf's Go loop does them all.
var geluPortable = geluKernel{"go math.Erf", func([]float32) int { return 0 }}

// geluKern is the active kernel (amd64's init installs the assembly).
var geluKern = geluPortable

// geluGo is GELUErf of one value.
func geluGo(v float32) float32 {
	f := float64(v)
	return float32(0.5 * f * (1 + math.Erf(f/math.Sqrt2)))
}
