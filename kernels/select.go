package kernels

import (
	"fmt"
	"os"
	"strings"
)

// EnvKernels names the environment variable that pins the kernel family:
// "auto" (or unset) runs the widest the CPU offers; "avx512", "avx2" and
// "generic" force a family ("avx2" on an AVX-512 host gives bit for bit
// what an AVX2 host gives: the micro-kernels' tile shapes fix the order of
// every floating-point sum; "generic" runs the portable Go kernels). A
// family whose instructions the CPU lacks is refused, naming what is
// missing. Outputs that pass through the reference forward (calibrated
// GPTQ, calibrate, the QNN bundle, eval) are byte-identical across hosts
// that run the same family.
const EnvKernels = "SPARKCONV_KERNELS"

// Kernel families, narrowest first.
const (
	familyGeneric = iota
	familyAVX2
	familyAVX512
	familyAVX512BF16
)

// families are the EnvKernels words, with the CPU flags each family needs.
var families = map[string]struct {
	family int
	needs  []string
}{
	"auto": {familyAVX512, nil}, "": {familyAVX512, nil},
	"avx512":     {familyAVX512, []string{"avx512f", "avx512dq", "avx2", "fma"}},
	"avx512bf16": {familyAVX512BF16, []string{"avx512_bf16", "avx512f", "avx512dq", "avx2", "fma"}},
	"avx2":       {familyAVX2, []string{"avx2", "fma"}},
	"generic":    {familyGeneric, nil},
}

// envFamily is the widest family EnvKernels allows; envErr is set when it
// holds an unknown value or a family this CPU cannot run (the kernels then
// run as "auto"; commands refuse to start, see EnvError). Package
// variables are set before any init.
var envFamily, envErr = parseFamily(os.Getenv(EnvKernels), CPU().Has)

// parseFamily reads an EnvKernels value; has tells which CPU flags are
// usable.
func parseFamily(v string, has func(flag string) bool) (int, error) {
	f, ok := families[v]
	switch {
	case v == "amx":
		return familyAVX512, fmt.Errorf("%s=amx: this build has no AMX kernel family (it has avx512bf16, avx512, avx2 and generic)", EnvKernels)
	case !ok:
		return familyAVX512, fmt.Errorf("%s=%q: want auto, avx512bf16, avx512, avx2 or generic", EnvKernels, v)
	}
	var missing []string
	for _, flag := range f.needs {
		if !has(flag) {
			missing = append(missing, flag)
		}
	}
	if len(missing) > 0 {
		return familyAVX512, fmt.Errorf("%s=%s: this CPU lacks %s", EnvKernels, v, strings.Join(missing, ", "))
	}
	return f.family, nil
}

// EnvError reports an EnvKernels value that names no kernel family.
func EnvError() error { return envErr }

// Family names the kernel family this process runs: "avx512bf16",
// "avx512", "avx2" or "generic". Outputs computed through the reference forward are
// byte-identical per family, so they record it.
func Family() string {
	if bf16Linears {
		return "avx512bf16"
	}
	switch sgemmKern.name {
	case "avx512-14x32":
		return "avx512"
	case "avx2-6x16":
		return "avx2"
	}
	return "generic"
}

// Active names the float32 GEMM micro-kernel in use (for example
// "avx2-6x16" or "go-2x4").
func Active() string { return sgemmKern.name }

// Choice is one row of the kernel selection table: an operation of the
// forward, the kernel that runs it in this process, and why.
type Choice struct {
	Op     string `json:"op"`
	Kernel string `json:"kernel"`
	Why    string `json:"why"`
}

// familyKernels names what each family runs for the forward's products
// (the init of arch_amd64.go installs them; usePortable the first row).
var familyKernels = map[string][4]string{
	"go-2x4": {"go-2x4", "go-2x4 + portable bf16 packer", "go dot (8 lane sums)", "widen 8 rows, go dot"},
	"avx2-6x16": {"avx2-6x16 (FMA) + avx2 transpose packer", "avx2-6x16 + avx2 widen-transpose packer (VPMOVZXWD, VPSLLD 16)",
		"avx2 dot4 (the go dot's order: multiply, then add)", "avx2 dot4, bf16 widened on load"},
	"avx512-14x32": {"avx512-14x32 (FMA)", "avx512-14x32 + portable bf16 packer", "avx512 sdot4 (FMA)", "avx512 sdot4, bf16 widened on load (VPMOVZXWD, VPSLLD 16)"},
}

// Selection is the kernel selection table of this process: for each
// product of the forward, the kernel the CPU probe, EnvKernels and this
// build chose, and why. The last two rows are the seam for the units this
// build has no kernel for (AVX512-BF16 dot products, AMX-BF16 tiles): none
// was written because none could be run and tested here ("real or
// absent"); a new kernel adds its family to familyKernels and its row.
func Selection() []Choice {
	f := CPU()
	names := familyKernels[sgemmKern.name]
	why := fmt.Sprintf("usable: %s", strings.Join(f.Usable, " "))
	switch {
	case os.Getenv(EnvKernels) != "" && os.Getenv(EnvKernels) != "auto":
		why += fmt.Sprintf("; %s=%s", EnvKernels, os.Getenv(EnvKernels))
	case sgemmKern == goSgemm:
		why += "; no avx2+fma"
	case sgemmKern.name == "avx2-6x16":
		why += "; no avx512f+avx512dq"
	}
	has := func(flag string) string {
		if f.Has(flag) {
			return "this CPU has " + flag
		}
		return "this CPU lacks " + flag
	}
	return []Choice{
		{"gemm, float32 x float32 (attention, dequantized weights)", names[0], why},
		{"gemm, float32 activations x bf16 weights (prefill linears, head)", names[1], why + "; weights stay bf16, widened exactly in the B panel"},
		{"matvec, float32 weights (decode)", names[2], why},
		{"matvec, bf16 weights (decode)", names[3], why + "; half the bytes of float32 weights"},
		{"GELU (erf) of the MLP, float64", geluKern.name, why + "; every result the Go expression's bit for bit"},
		dotRow(has("avx512_bf16")),
		{"bf16 tile gemm (AMX-BF16)", "absent",
			has("amx_bf16") + ", tile permission " + f.AMX + "; no kernel in this build: no AMX machine was available to test one"},
	}
}

// dotRow is the Selection row of the avx512bf16 family's linear products.
func dotRow(has string) Choice {
	op := "linears of GPTQ's calibration forward, bf16 x bf16 dot products (AVX512-BF16 VDPBF16PS)"
	if bf16Linears {
		return Choice{op, "avx512bf16-14x32 (VDPBF16PS) + avx512 rounding packers",
			has + "; " + EnvKernels + "=avx512bf16: activations and weights rounded to bf16, fp32 sums"}
	}
	return Choice{op, "float32 (the gemm rows above)", has + "; only with " + EnvKernels +
		"=avx512bf16 (auto keeps float32: the bf16 rounding moves calibrated outputs, and the float32 forward is what verify checks)"}
}
