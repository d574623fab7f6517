package kernels

import (
	"fmt"
	"strings"
	"sync"
)

// Features is what this CPU offers the kernels and what the operating
// system lets them use: CPUID's feature bits, masked by the register
// state the OS saves (XCR0) and, for AMX, by the Linux permission the
// process must request before touching the tiles. Flag names are those of
// /proc/cpuinfo.
type Features struct {
	Arch string `json:"arch"`
	// CPUID bits (leaf 1, 7/0 and 7/1), whatever the OS enables.
	CPUID []string `json:"cpuid"`
	// Usable is CPUID masked by XCR0: the flags a kernel may use (Linux's
	// /proc/cpuinfo shows the same set: it hides what it does not save).
	Usable []string `json:"usable"`
	// XCR0 is the extended control register 0 (0 when unreadable).
	XCR0 uint64 `json:"xcr0"`
	// AMX is the outcome of the tile-data permission request
	// (arch_prctl ARCH_REQ_XCOMP_PERM, made once): "granted" or "not
	// supported: why". Never fatal: without it AMX is not used.
	AMX string `json:"amx"`
}

// Has reports whether flag (a /proc/cpuinfo name) is usable.
func (f Features) Has(flag string) bool {
	for _, u := range f.Usable {
		if u == flag {
			return true
		}
	}
	return false
}

// featureBit is one CPUID feature: leaf, sub-leaf, register (0..3 =
// eax, ebx, ecx, edx), bit, and the XCR0 state components it needs.
type featureBit struct {
	flag      string
	leaf, sub uint32
	reg, bit  uint
	xcr0      uint64
}

// XCR0 state components (Intel SDM vol. 1, 13.1).
const (
	xcr0SSE      = 1 << 1
	xcr0AVX      = 1 << 2               // YMM upper halves
	xcr0AVX512   = 1<<5 | 1<<6 | 1<<7   // opmask, ZMM0-15 upper, ZMM16-31
	xcr0AMX      = 1<<17 | 1<<18        // XTILECFG, XTILEDATA
	xcr0YMM      = xcr0SSE | xcr0AVX    // what AVX/AVX2/FMA need
	xcr0ZMM      = xcr0YMM | xcr0AVX512 // what AVX-512 needs
	xfeatureTile = 18                   // XFEATURE_XTILEDATA
)

// featureBits are the features the kernel selection looks at.
var featureBits = []featureBit{
	{"fma", 1, 0, 2, 12, xcr0YMM},
	{"avx", 1, 0, 2, 28, xcr0YMM},
	{"avx2", 7, 0, 1, 5, xcr0YMM},
	{"avx512f", 7, 0, 1, 16, xcr0ZMM},
	{"avx512dq", 7, 0, 1, 17, xcr0ZMM},
	{"avx512bw", 7, 0, 1, 30, xcr0ZMM},
	{"avx512_bf16", 7, 1, 0, 5, xcr0ZMM},
	{"amx_bf16", 7, 0, 3, 22, xcr0AMX},
	{"amx_tile", 7, 0, 3, 24, xcr0AMX},
	{"amx_int8", 7, 0, 3, 25, xcr0AMX},
}

// ProbedFlags are the /proc/cpuinfo flags the probe reports on.
func ProbedFlags() []string {
	out := make([]string, len(featureBits))
	for i, b := range featureBits {
		out[i] = b.flag
	}
	return out
}

// decodeFeatures turns raw CPUID registers (regs(leaf, sub)) and XCR0
// into the CPUID and usable flag lists.
func decodeFeatures(regs func(leaf, sub uint32) [4]uint32, xcr0 uint64) (cpuid, usable []string) {
	maxLeaf := regs(0, 0)[0]
	max7 := uint32(0)
	if maxLeaf >= 7 {
		max7 = regs(7, 0)[0]
	}
	for _, b := range featureBits {
		if b.leaf > maxLeaf || (b.leaf == 7 && b.sub > max7) {
			continue
		}
		if regs(b.leaf, b.sub)[b.reg]>>b.bit&1 == 0 {
			continue
		}
		cpuid = append(cpuid, b.flag)
		if xcr0&b.xcr0 == b.xcr0 {
			usable = append(usable, b.flag)
		}
	}
	return cpuid, usable
}

var (
	cpuOnce sync.Once
	cpuFeat Features
)

// CPU probes the running CPU once, including the AMX tile permission
// request, and returns what it found.
func CPU() Features {
	cpuOnce.Do(func() {
		cpuFeat = probeCPU()
		cpuFeat.AMX = "granted"
		if err := requestAMX(); err != nil {
			cpuFeat.AMX = "not supported: " + err.Error()
		}
	})
	return cpuFeat
}

// String is a one-line summary ("amd64: usable fma avx avx2; AMX not
// supported: ...").
func (f Features) String() string {
	return fmt.Sprintf("%s: usable %s; AMX %s", f.Arch, strings.Join(f.Usable, " "), f.AMX)
}
