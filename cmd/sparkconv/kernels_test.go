package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sparkconv/kernels"
)

// TestKernelFamilyForced: SPARKCONV_KERNELS forces a family the CPU has,
// and a word naming no family, or a family this CPU lacks, is a usage
// error (exit 2) that names what is missing, before any work.
func TestKernelFamilyForced(t *testing.T) {
	type run1 struct {
		value string
		code  int
		say   string
	}
	has := kernels.CPU().Has
	cases := []run1{
		{"generic", 0, ""},
		{"amx", 2, "SPARKCONV_KERNELS=amx: this build has no AMX kernel family"},
		{"avx-512", 2, `SPARKCONV_KERNELS="avx-512": want auto, avx512bf16, avx512, avx2 or generic`},
	}
	for _, fam := range []struct{ name, flag string }{{"avx512bf16", "avx512_bf16"}, {"avx512", "avx512f"}, {"avx2", "avx2"}} {
		if has(fam.flag) {
			cases = append(cases, run1{fam.name, 0, ""})
		} else {
			cases = append(cases, run1{fam.name, 2, "SPARKCONV_KERNELS=" + fam.name + ": this CPU lacks " + fam.flag})
		}
	}
	for _, c := range cases {
		t.Run(c.value, func(t *testing.T) {
			t.Setenv(kernels.EnvKernels, c.value)
			_, errOut, code := run(t, "plan")
			if code != c.code || !strings.Contains(errOut, c.say) {
				t.Errorf("%s=%s sparkconv plan: exit %d, %q; want exit %d saying %q", kernels.EnvKernels, c.value, code, errOut, c.code, c.say)
			}
		})
	}
}

// TestCPUProfileEnv: SPARKCONV_CPUPROFILE writes a CPU profile of the
// command to a new file, and refuses (exit 2, naming the variable) a file
// that exists, which it leaves as it was.
func TestCPUProfileEnv(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	t.Setenv(envCPUProfile, path)
	if _, errOut, code := run(t, "version"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b { // a gzipped profile
		t.Fatalf("profile %q: %d bytes, %v", path, len(b), err)
	}
	_, errOut, code := run(t, "version")
	after, _ := os.ReadFile(path)
	if code != 2 || !strings.Contains(errOut, envCPUProfile) || !bytes.Equal(after, b) {
		t.Errorf("existing profile: exit %d, %q; file changed %v", code, errOut, !bytes.Equal(after, b))
	}
}
