package kernels

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"
)

func TestParseFamily(t *testing.T) {
	avx512 := func(string) bool { return true }
	avx2 := func(f string) bool { return f == "avx2" || f == "fma" }
	none := func(string) bool { return false }
	for _, c := range []struct {
		in   string
		has  func(string) bool
		want int
		err  string // "" when accepted
	}{
		{"", none, familyAVX512, ""}, {"auto", none, familyAVX512, ""},
		{"avx512", avx512, familyAVX512, ""}, {"avx2", avx512, familyAVX2, ""}, {"avx2", avx2, familyAVX2, ""},
		{"generic", none, familyGeneric, ""},
		{"avx512", avx2, familyAVX512, "SPARKCONV_KERNELS=avx512: this CPU lacks avx512f, avx512dq"},
		{"avx2", none, familyAVX512, "SPARKCONV_KERNELS=avx2: this CPU lacks avx2, fma"},
		{"amx", avx512, familyAVX512, "SPARKCONV_KERNELS=amx: this build has no AMX kernel family"},
		{"AVX2", avx512, familyAVX512, `SPARKCONV_KERNELS="AVX2": want auto, avx512bf16, avx512, avx2 or generic`},
		{"avx512bf16", avx512, familyAVX512BF16, ""},
		{"avx512bf16", func(f string) bool { return f != "avx512_bf16" }, familyAVX512, "SPARKCONV_KERNELS=avx512bf16: this CPU lacks avx512_bf16"},
	} {
		got, err := parseFamily(c.in, c.has)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if got != c.want || (c.err == "") != (err == nil) || !strings.HasPrefix(msg, c.err) {
			t.Errorf("parseFamily(%q) = %d, %q; want %d, %q", c.in, got, msg, c.want, c.err)
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
		if fam := os.Getenv(EnvKernels); Family() != fam || bf16Linears != (fam == "avx512bf16") {
			t.Fatalf("%s=%s: Family() = %s", EnvKernels, fam, Family())
		}
		return
	}
	want := map[string]string{"generic": "go-2x4"}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		want["avx2"] = "avx2-6x16"
	}
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ {
		want["avx512"] = "avx512-14x32"
		if cpu.X86.HasAVX512BF16 {
			want["avx512bf16"] = "avx512-14x32" // its float32 products are avx512's
		}
	}
	for fam, kern := range want {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestEnvKernelsPins$")
		cmd.Env = append(os.Environ(), EnvKernels+"="+fam, "KERNELS_SELECT_CHILD="+kern)
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "PASS") {
			t.Errorf("%s=%s: %v\n%s", EnvKernels, fam, err, out)
		}
	}
}

// TestSelection checks the table names the kernels actually installed.
func TestSelection(t *testing.T) {
	rows := Selection()
	if len(rows) != 7 {
		t.Fatalf("%d rows", len(rows))
	}
	if !strings.HasPrefix(rows[0].Kernel, Active()) {
		t.Errorf("gemm row %q, active kernel %s", rows[0].Kernel, Active())
	}
	if rows[4].Kernel != geluKern.name {
		t.Errorf("GELU row %q, active kernel %s", rows[4].Kernel, geluKern.name)
	}
	if got := rows[5].Kernel; strings.HasPrefix(got, "avx512bf16") != bf16Linears {
		t.Errorf("bf16 dot row %q with the family %s", got, Family())
	}
	if r := rows[6]; r.Kernel != "absent" {
		t.Errorf("%s: %q: this build has no such kernel", r.Op, r.Kernel)
	}
	restore := usePortable()
	defer restore()
	if got := Selection()[3].Kernel; got != "widen 8 rows, go dot" {
		t.Errorf("portable bf16 matvec row %q", got)
	}
}

// TestProbeAgreesWithXSysCPU checks the feature probe against
// golang.org/x/sys/cpu, which chooses the kernel family at init.
func TestProbeAgreesWithXSysCPU(t *testing.T) {
	f := CPU()
	for _, c := range []struct {
		flag string
		has  bool
	}{{"avx2", cpu.X86.HasAVX2}, {"fma", cpu.X86.HasFMA}, {"avx512f", cpu.X86.HasAVX512F},
		{"avx512dq", cpu.X86.HasAVX512DQ}, {"avx512_bf16", cpu.X86.HasAVX512BF16}} {
		if runtime.GOARCH == "amd64" && f.Has(c.flag) != c.has {
			t.Errorf("%s: probe %v, x/sys/cpu %v", c.flag, f.Has(c.flag), c.has)
		}
	}
}
