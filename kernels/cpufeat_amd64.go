package kernels

// cpuid executes CPUID with eax = leaf, ecx = sub (cpuid_amd64.s).
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// xgetbv reads XCR0 (cpuid_amd64.s); only valid when CPUID.1:ECX.OSXSAVE.
func xgetbv() (eax, edx uint32)

func probeCPU() Features {
	regs := func(leaf, sub uint32) [4]uint32 {
		a, b, c, d := cpuid(leaf, sub)
		return [4]uint32{a, b, c, d}
	}
	var xcr0 uint64
	if _, _, ecx, _ := cpuid(1, 0); ecx>>27&1 == 1 { // OSXSAVE
		lo, hi := xgetbv()
		xcr0 = uint64(hi)<<32 | uint64(lo)
	}
	f := Features{Arch: "amd64", XCR0: xcr0}
	f.CPUID, f.Usable = decodeFeatures(regs, xcr0)
	return f
}
