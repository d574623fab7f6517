package kernels

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkTuneSgemm sweeps the active float32 kernel's blocking on the
// prefill shapes. It runs only with KERNELS_TUNE=1 (it is slow).
func BenchmarkTuneSgemm(b *testing.B) {
	if os.Getenv("KERNELS_TUNE") == "" {
		b.Skip("set KERNELS_TUNE=1")
	}
	saved := *sgemmKern
	defer func() { *sgemmKern = saved }()
	for _, kc := range tuneList("KERNELS_KC", 256, 384, 512) {
		for _, nc := range tuneList("KERNELS_NC", 128, 256) {
			for _, mcp := range tuneList("KERNELS_MCP", 12, 64) {
				sgemmKern.kc, sgemmKern.nc, sgemmKern.mc = kc, nc, mcp*sgemmKern.mr
				for _, s := range benchShapes[:1] {
					b.Run(fmt.Sprintf("kc%d_nc%d_mc%d/m%d_n%d_k%d", kc, nc, mcp*sgemmKern.mr, s.m, s.n, s.k), func(b *testing.B) {
						r := rand.New(rand.NewPCG(1, 1))
						x, w := randF32(r, s.m*s.k), randF32(r, s.n*s.k)
						c := make([]float32, s.m*s.n)
						cpu0 := processCPU()
						for b.Loop() {
							MatMulNT(c, x, w, s.m, s.n, s.k)
						}
						reportGFLOPs(b, 2*float64(s.m)*float64(s.n)*float64(s.k), cpu0)
					})
				}
			}
		}
	}
}

// tuneList returns the integers in environment variable name, or def.
func tuneList(name string, def ...int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(f)
		if err == nil {
			out = append(out, n)
		}
	}
	return out
}
