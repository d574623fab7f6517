package plan

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"sparkconv/kernels"
)

// TestAutoRecorded: each recorded cpuinfo gets its class's path.
func TestAutoRecorded(t *testing.T) {
	cases := []struct {
		file, class, priority, path, pack string
		verified                          bool
	}{
		{"cpuinfo-xeon-sapphire-rapids-amx.txt", "x86-amx", "speed", PathW4A8, "", true},
		{"cpuinfo-xeon-sapphire-rapids-amx.txt", "x86-amx", "fidelity", PathW4A16, "--pack avx512", true},
		{"cpuinfo-xeon-icelake-avx512.txt", "x86-avx512", "speed", PathW4A16, "--pack avx512", true},
		{"cpuinfo-epyc-avx2.txt", "x86-avx2", "speed", PathW4A16, "--pack avx2", true},
		{"cpuinfo-graviton3-arm64.txt", "arm64", "speed", PathW4A16, "--pack portable", false},
	}
	for _, c := range cases {
		data, err := os.ReadFile(filepath.Join("testdata", c.file))
		if err != nil {
			t.Fatal(err)
		}
		ch, err := Auto(data, c.file, c.priority, "/m/spark")
		if err != nil {
			t.Fatal(err)
		}
		if ch.Target != c.class || ch.Path != c.path || ch.Verified != c.verified || !strings.Contains(ch.Command, c.pack) || !strings.Contains(ch.Command, "--model /m/spark --out /m/spark-") {
			t.Errorf("%s %s: %+v", c.file, c.priority, ch)
		}
		if ch.Why == "" || ch.Probe == nil || ch.Probe.Source != c.file {
			t.Errorf("%s: why %q probe %+v", c.file, ch.Why, ch.Probe)
		}
	}
}

// TestChooseTargets covers every explicit target and the refusals.
func TestChooseTargets(t *testing.T) {
	want := map[string]string{"x86-amx": PathW4A8, "x86-avx512": PathW4A16, "x86-avx2": PathW4A16, "arm64": PathW4A16, "phone": PathONNX}
	for target, path := range want {
		c, err := Choose(target, "speed", "M")
		if err != nil || c.Path != path {
			t.Errorf("%s: %+v %v", target, c, err)
		}
	}
	// Where the build runs: vLLM's AMX kernel for W4A8 on AMX; elsewhere
	// on x86, the gptq checkpoint meets vLLM's W4A16 kernel (bf16
	// activations), which plan says beside its own choice.
	runs := []struct {
		target, runs, gptqHere string
	}{
		{"x86-amx", "int4_scaled_mm_cpu", ""},
		{"x86-avx512", "tinygemm", "cpu_gemm_wna16"},
		{"x86-avx2", "tinygemm", "cpu_gemm_wna16"},
		{"x86", "tinygemm", "cpu_gemm_wna16"},
		{"arm64", "tinygemm", ""},
		{"phone", "QNN HTP", ""},
	}
	for _, r := range runs {
		c, err := Choose(r.target, "speed", "M")
		if err != nil || !strings.Contains(c.Runs, r.runs) || (r.gptqHere == "") != (c.GPTQHere == "") || !strings.Contains(c.GPTQHere, r.gptqHere) {
			t.Errorf("%s: runs %q, gptq here %q (%v)", r.target, c.Runs, c.GPTQHere, err)
		}
	}
	if c, _ := Choose("phone", "speed", "M"); !strings.Contains(c.Command, "export-onnx") || !strings.Contains(c.Command, "qnn-bundle") || !strings.Contains(c.Command, "--precision w8a16") {
		t.Errorf("phone command %q", c.Command)
	}
	// Size first: the phone gets the w4a16-lpbq bundle; a CPU what speed
	// picks, saying why.
	if c, _ := Choose("phone", "size", "M"); c.Path != PathONNXW4 || !strings.Contains(c.Command, "--precision w4a16-lpbq") || !strings.Contains(c.Command, "sparkconv rotate") || c.Runs == "" {
		t.Errorf("phone, size: %+v", c)
	}
	for _, target := range []string{"x86-avx512", "x86-avx2", "x86", "arm64"} {
		speed, _ := Choose(target, "speed", "M")
		size, err := Choose(target, "size", "M")
		if err != nil || size.Path != speed.Path || size.Command != speed.Command || size.Priority != "size" || !strings.HasPrefix(size.Why, "size first") {
			t.Errorf("%s, size: %+v (%v), speed %+v", target, size, err, speed)
		}
	}
	// On AMX speed keeps 16 linears in bf16 at group 32; size drops them
	// and takes group 128, on the same kernel.
	speed, _ := Choose("x86-amx", "speed", "M")
	size, err := Choose("x86-amx", "size", "M")
	if want := "sparkconv w4a8-zp --model M-rot --out M-w4a8-zp --group 32 --quant-head --keep-float 16"; !strings.HasSuffix(speed.Command, want) {
		t.Errorf("x86-amx, speed: command %q, want it to end %q", speed.Command, want)
	}
	if want := "sparkconv w4a8-zp --model M-rot --out M-w4a8-zp --group 128 --quant-head"; err != nil || !strings.HasSuffix(size.Command, want) ||
		size.Path != PathW4A8 || size.Runs != speed.Runs || !strings.HasPrefix(size.Why, "size first") {
		t.Errorf("x86-amx, size: %+v (%v), want a command ending %q", size, err, want)
	}
	if _, err := Choose("mips", "speed", "M"); err == nil || !strings.Contains(err.Error(), "--target") {
		t.Errorf("bad target: %v", err)
	}
	if _, err := Choose("arm64", "fast", "M"); err == nil || !strings.Contains(err.Error(), "--priority") {
		t.Errorf("bad priority: %v", err)
	}
	if _, err := ProbeCPUInfo([]byte("hello: world\n"), "x", "amd64"); err == nil || !strings.Contains(err.Error(), "not a /proc/cpuinfo") {
		t.Errorf("garbage cpuinfo: %v", err)
	}
}

// FuzzProbeCPUInfo: any text probes without panicking, and a probe that
// succeeds always has a class the chooser knows.
func FuzzProbeCPUInfo(f *testing.F) {
	for _, n := range []string{"cpuinfo-epyc-avx2.txt", "cpuinfo-graviton3-arm64.txt"} {
		data, _ := os.ReadFile(filepath.Join("testdata", n))
		f.Add(data)
	}
	f.Add([]byte("flags: avx2 amx_tile\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ProbeCPUInfo(data, "fuzz", "amd64")
		if err != nil {
			return
		}
		if _, err := Choose(p.Class(), "speed", "M"); err != nil {
			t.Errorf("class %q: %v", p.Class(), err)
		}
	})
}

// TestProbeAgreesWithKernels reads this host's /proc/cpuinfo with
// ProbeCPUInfo and checks each deciding flag against the kernels' CPUID
// probe (which Linux's flags list must match: it shows what the CPU has
// and the kernel enabled).
func TestProbeAgreesWithKernels(t *testing.T) {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil || runtime.GOARCH != "amd64" {
		t.Skip("needs /proc/cpuinfo on amd64")
	}
	p, err := ProbeCPUInfo(data, "/proc/cpuinfo", runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	f := kernels.CPU()
	for _, fl := range []string{"amx_tile", "amx_int8", "avx512f", "avx2"} {
		if got, want := slices.Contains(p.Flags, fl), f.Has(fl); got != want {
			t.Errorf("%s: plan's cpuinfo probe %v, kernels' CPUID probe %v (%s)", fl, got, want, f)
		}
	}
	if !strings.HasPrefix(p.Class(), "x86") {
		t.Errorf("class %s on amd64", p.Class())
	}
}
