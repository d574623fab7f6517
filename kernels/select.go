package kernels

import (
	"fmt"
	"os"
)

// EnvKernels names the environment variable that pins the kernel family:
// "auto" (or unset) runs the widest the CPU offers, "avx2" never uses the
// AVX-512 kernels (on an AVX-512 host the results are then bit for bit those
// of an AVX2 host: the micro-kernels' tile shapes fix the order of every
// floating-point sum), "generic" runs the portable Go kernels only. Outputs
// that pass through the reference forward (calibrated GPTQ, calibrate, the
// QNN bundle, eval) are byte-identical across hosts that run the same family.
const EnvKernels = "SPARKCONV_KERNELS"

// Kernel families, narrowest first.
const (
	familyGeneric = iota
	familyAVX2
	familyAVX512
)

var familyNames = map[string]int{"auto": familyAVX512, "": familyAVX512, "avx2": familyAVX2, "generic": familyGeneric}

// envFamily is the widest family EnvKernels allows; envErr is set when it
// holds an unknown value (the kernels then run as "auto"; commands refuse
// to start, see EnvError). Package variables are set before any init.
var envFamily, envErr = parseFamily(os.Getenv(EnvKernels))

// parseFamily reads an EnvKernels value.
func parseFamily(v string) (int, error) {
	f, ok := familyNames[v]
	if !ok {
		return familyAVX512, fmt.Errorf("%s=%q: want auto, avx2 or generic", EnvKernels, v)
	}
	return f, nil
}

// EnvError reports an EnvKernels value that names no kernel family.
func EnvError() error { return envErr }

// Active names the float32 GEMM micro-kernel in use (for example
// "avx2-6x16" or "go-2x4").
func Active() string { return sgemmKern.name }
