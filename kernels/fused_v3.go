//go:build amd64.v3

package kernels

// goFusesMulAdd: with GOAMD64=v3 or later the compiler fuses x*y + z into
// one FMA (math.Erf's polynomials included), which the GELU replays, built
// on separate multiplies and adds, would not match.
const goFusesMulAdd = true
