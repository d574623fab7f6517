package kernels

import (
	"testing"

	"golang.org/x/sys/cpu"
)

func TestTranspose16x16AVX512(t *testing.T) {
	if !cpu.X86.HasAVX512F || !cpu.X86.HasAVX512DQ {
		t.Skip("no AVX-512")
	}
	const lds, ldd = 21, 19
	src := make([]float32, 16*lds)
	for i := range src {
		src[i] = float32(i)
	}
	for _, mask := range []uint16{0xFFFF, 0x3FFF, 0x0001} {
		dst := make([]float32, 16*ldd)
		for i := range dst {
			dst[i] = -1
		}
		transpose16x16AVX512(&src[0], lds, &dst[0], ldd, mask)
		for c := range 16 {
			for r := range ldd {
				want := float32(-1)
				if r < 16 && mask&(1<<r) != 0 {
					want = src[r*lds+c]
				}
				if got := dst[c*ldd+r]; got != want {
					t.Fatalf("mask %#x: dst[%d][%d] = %g, want %g", mask, c, r, got, want)
				}
			}
		}
	}
}

func TestAddF32ToF64Helpers(t *testing.T) {
	saved1, saved2 := addF32ToF64, transposeAdd
	defer func() { addF32ToF64, transposeAdd = saved1, saved2 }()
	ref := func(dst []float64, src []float32) {
		for i, v := range src {
			dst[i] += float64(v)
		}
	}
	adders := map[string]func([]float64, []float32){"installed": addF32ToF64}
	if cpu.X86.HasAVX2 {
		adders["avx2"] = addF32ToF64Asm(addF32ToF64AVX2)
	} else {
		t.Log("skipped the avx2 adder: this host has no AVX2")
	}
	if cpu.X86.HasAVX512F {
		adders["avx512"] = addF32ToF64Asm(addF32ToF64AVX512)
	} else {
		t.Log("skipped the avx512 adder: this host has no AVX-512")
	}
	for name, add := range adders {
		for _, n := range []int{0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100} {
			src := make([]float32, n)
			dst, want := make([]float64, n+1), make([]float64, n+1)
			for i := range src {
				src[i] = float32(i)*1.0000001 + 0.25
				dst[i], want[i] = float64(-i)/3, float64(-i)/3
			}
			ref(want, src)
			add(dst, src)
			for i := range dst {
				if dst[i] != want[i] {
					t.Fatalf("%s, n=%d: dst[%d] = %g, want %g", name, n, i, dst[i], want[i])
				}
			}
		}
	}
	for _, s := range []struct{ rows, cols int }{{16, 16}, {17, 33}, {40, 5}, {3, 48}, {32, 32}} {
		lds, ldd := s.cols+3, s.rows+5
		src := make([]float32, s.rows*lds)
		for i := range src {
			src[i] = float32(i%97) - 40
		}
		dst := make([]float64, s.cols*ldd)
		want := make([]float64, s.cols*ldd)
		for i := range dst {
			dst[i], want[i] = float64(i), float64(i)
		}
		transposeAddGo(want, ldd, src, lds, s.rows, s.cols)
		transposeAdd(dst, ldd, src, lds, s.rows, s.cols)
		for i := range dst {
			if dst[i] != want[i] {
				t.Fatalf("%dx%d: dst[%d] = %g, want %g", s.rows, s.cols, i, dst[i], want[i])
			}
		}
	}
}

func TestTranspose8x8F64AVX512(t *testing.T) {
	if !cpu.X86.HasAVX512F || !cpu.X86.HasAVX512DQ {
		t.Skip("no AVX-512")
	}
	const lds, ldd = 11, 13
	src := make([]float64, 8*lds)
	for i := range src {
		src[i] = float64(i)
	}
	for _, mask := range []uint8{0xFF, 0x3F, 0x01} {
		dst := make([]float64, 8*ldd)
		for i := range dst {
			dst[i] = -1
		}
		transpose8x8F64AVX512(&src[0], lds, &dst[0], ldd, mask, -2)
		for c := range 8 {
			for r := range ldd {
				want := -1.0
				if r < 8 && mask&(1<<r) != 0 {
					want = -2 * src[r*lds+c]
				}
				if got := dst[c*ldd+r]; got != want {
					t.Fatalf("mask %#x: dst[%d][%d] = %g, want %g", mask, c, r, got, want)
				}
			}
		}
	}
}
