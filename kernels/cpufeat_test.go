package kernels

import (
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// fakeCPUID answers CPUID from a table of set bits: leaf<<8|sub -> regs.
func fakeCPUID(max7 uint32, set map[uint32][4]uint32) func(leaf, sub uint32) [4]uint32 {
	return func(leaf, sub uint32) [4]uint32 {
		r := set[leaf<<8|sub]
		switch {
		case leaf == 0:
			r[0] = 7
		case leaf == 7 && sub == 0:
			r[0] = max7
		}
		return r
	}
}

func TestDecodeFeatures(t *testing.T) {
	avx2 := [4]uint32{1: 1 << 5}
	amx := [4]uint32{1: 1<<5 | 1<<16, 3: 1<<22 | 1<<24 | 1<<25}
	leaf1 := [4]uint32{2: 1<<12 | 1<<28}
	for _, c := range []struct {
		name          string
		max7          uint32
		regs          map[uint32][4]uint32
		xcr0          uint64
		cpuid, usable string
	}{
		{"avx2 host", 1, map[uint32][4]uint32{1 << 8: leaf1, 7 << 8: avx2}, xcr0YMM, "fma avx avx2", "fma avx avx2"},
		{"OS saves no ymm", 1, map[uint32][4]uint32{1 << 8: leaf1, 7 << 8: avx2}, xcr0SSE, "fma avx avx2", ""},
		{"AMX without tile state", 1, map[uint32][4]uint32{1 << 8: leaf1, 7 << 8: amx, 7<<8 | 1: {0: 1 << 5}}, xcr0ZMM,
			"fma avx avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8", "fma avx avx2 avx512f avx512_bf16"},
		{"AMX enabled", 1, map[uint32][4]uint32{1 << 8: leaf1, 7 << 8: amx}, xcr0ZMM | xcr0AMX,
			"fma avx avx2 avx512f amx_bf16 amx_tile amx_int8", "fma avx avx2 avx512f amx_bf16 amx_tile amx_int8"},
		// Sub-leaf 1 is read only when leaf 7/0 says it exists.
		{"no leaf 7/1", 0, map[uint32][4]uint32{7 << 8: amx, 7<<8 | 1: {0: 1 << 5}}, xcr0ZMM,
			"avx2 avx512f amx_bf16 amx_tile amx_int8", "avx2 avx512f"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cpuid, usable := decodeFeatures(fakeCPUID(c.max7, c.regs), c.xcr0)
			if got := strings.Join(cpuid, " "); got != c.cpuid {
				t.Errorf("cpuid = %q, want %q", got, c.cpuid)
			}
			if got := strings.Join(usable, " "); got != c.usable {
				t.Errorf("usable = %q, want %q", got, c.usable)
			}
		})
	}
}

// cpuinfoFlags is the first "flags" line of /proc/cpuinfo.
func cpuinfoFlags(t *testing.T) []string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo: %v", err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			return strings.Fields(v)
		}
	}
	t.Skip("/proc/cpuinfo has no flags line (not x86)")
	return nil
}

// TestCPUAgreesWithCPUInfo checks the probe against what Linux reports on
// this host: Linux lists a flag when the CPU has it and the kernel saves
// its state, which is the probe's Usable.
func TestCPUAgreesWithCPUInfo(t *testing.T) {
	if runtime.GOARCH != "amd64" || runtime.GOOS != "linux" {
		t.Skip("linux/amd64 only")
	}
	flags := cpuinfoFlags(t)
	f := CPU()
	for _, fl := range ProbedFlags() {
		if got, want := f.Has(fl), slices.Contains(flags, fl); got != want {
			t.Errorf("%s: probe says %v, /proc/cpuinfo says %v (%s)", fl, got, want, f)
		}
	}
	if f.XCR0&xcr0YMM != xcr0YMM && f.Has("avx2") {
		t.Errorf("avx2 usable but XCR0 = %#x does not save ymm", f.XCR0)
	}
}

// TestAMXPermission runs the tile permission request: granted where the
// CPU and kernel have AMX, an error (never a crash) elsewhere.
func TestAMXPermission(t *testing.T) {
	f := CPU()
	err := requestAMX()
	if f.Has("amx_tile") {
		if err != nil || f.AMX != "granted" {
			t.Fatalf("AMX host: request = %v, CPU().AMX = %q", err, f.AMX)
		}
		return
	}
	if err == nil {
		t.Fatalf("no usable amx_tile (%s) but the permission request succeeded", f)
	}
	if !strings.HasPrefix(f.AMX, "not supported: ") {
		t.Errorf("CPU().AMX = %q, want \"not supported: ...\"", f.AMX)
	}
	t.Logf("request on this host: %v", err)
}
