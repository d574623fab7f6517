package kernels

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"
)

func TestParseFamily(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		ok   bool
	}{{"", familyAVX512, true}, {"auto", familyAVX512, true}, {"avx2", familyAVX2, true},
		{"generic", familyGeneric, true}, {"AVX2", familyAVX512, false}, {"avx512", familyAVX512, false}} {
		got, err := parseFamily(c.in)
		if got != c.want || (err == nil) != c.ok {
			t.Errorf("parseFamily(%q) = %d, %v; want %d, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}

// TestEnvKernelsPins runs this test binary again under each family and checks
// which micro-kernel the package chose.
func TestEnvKernelsPins(t *testing.T) {
	if v := os.Getenv("KERNELS_SELECT_CHILD"); v != "" {
		if Active() != v {
			t.Fatalf("%s=%q: active kernel %s, want %s", EnvKernels, os.Getenv(EnvKernels), Active(), v)
		}
		return
	}
	want := map[string]string{"generic": "go-2x4"}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		want["avx2"] = "avx2-6x16"
	}
	for fam, kern := range want {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestEnvKernelsPins$")
		cmd.Env = append(os.Environ(), EnvKernels+"="+fam, "KERNELS_SELECT_CHILD="+kern)
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "PASS") {
			t.Errorf("%s=%s: %v\n%s", EnvKernels, fam, err, out)
		}
	}
}
