//go:build !amd64.v3

package kernels

// goFusesMulAdd: below GOAMD64=v3 (and off amd64) the compiler keeps
// x*y + z as a multiply and an add, as the GELU replays do.
const goFusesMulAdd = false
