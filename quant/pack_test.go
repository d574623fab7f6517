package quant

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func randomCodes(n, k int, seed uint64) []uint8 {
	r := rand.New(rand.NewPCG(seed, 3))
	c := make([]uint8, n*k)
	for i := range c {
		c[i] = uint8(r.IntN(16))
	}
	return c
}

func TestGPTQQWeightExample(t *testing.T) {
	// N=2, K=16: row 0 holds codes k, row 1 holds 15-k.
	codes := make([]uint8, 2*16)
	for k := 0; k < 16; k++ {
		codes[k], codes[16+k] = uint8(k), uint8(15-k)
	}
	got := make([]byte, 16/8*2*4)
	if err := PackGPTQQWeight(got, codes, 2, 16); err != nil {
		t.Fatal(err)
	}
	// qweight [K/8=2, N=2]: word [r, n] nibble j = code (8r+j, n), low first.
	words := []uint32{0x76543210, 0x89ABCDEF, 0xFEDCBA98, 0x01234567}
	want := make([]byte, 16)
	for i, w := range words {
		binary.LittleEndian.PutUint32(want[4*i:], w)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("qweight bytes\n got % x\nwant % x", got, want)
	}
	if want[0] != 0x10 || want[3] != 0x76 { // little-endian int32 as safetensors stores it
		t.Fatal("expected bytes 10 .. 76")
	}
	back := make([]uint8, len(codes))
	if err := UnpackGPTQQWeight(back, got, 2, 16); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back, codes) {
		t.Fatalf("unpacked %v, want %v", back, codes)
	}
}

func TestGPTQSideTensors(t *testing.T) {
	// qzeros for sym: every word 0x77777777 = 2004318071.
	qz := make([]byte, 2*16/8*4)
	if err := GPTQSymQZeros(qz, 2, 16); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(qz); i += 4 {
		if w := binary.LittleEndian.Uint32(qz[i:]); w != 0x77777777 || int32(w) != 2004318071 {
			t.Fatalf("qzeros word %d = %#x", i/4, w)
		}
	}
	// The general v1 packer agrees: true zero 8 stored as 7.
	eights := slices.Repeat([]uint8{8}, 2*16)
	qz2 := make([]byte, len(qz))
	if err := PackGPTQQZeros(qz2, eights, 2, 16); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(qz, qz2) {
		t.Fatalf("PackGPTQQZeros(8s) = % x, want all 77", qz2)
	}
	// Zero points 1..8 along N are stored as 0..7, low nibble first.
	z := []uint8{1, 2, 3, 4, 5, 6, 7, 8}
	qz3 := make([]byte, 4)
	if err := PackGPTQQZeros(qz3, z, 1, 8); err != nil {
		t.Fatal(err)
	}
	if w := binary.LittleEndian.Uint32(qz3); w != 0x76543210 {
		t.Fatalf("qzeros word = %#x, want 0x76543210", w)
	}
	zb := make([]uint8, 8)
	if err := UnpackGPTQQZeros(zb, qz3, 1, 8); err != nil || !slices.Equal(zb, z) {
		t.Fatalf("unpacked zeros %v (%v), want %v", zb, err, z)
	}
	if err := PackGPTQQZeros(qz3, []uint8{0, 1, 1, 1, 1, 1, 1, 1}, 1, 8); err == nil {
		t.Error("zero point 0 accepted; v1 cannot store it")
	}

	// scales: per-row [N=3, groups=2] -> fp16 [groups, N].
	scales := []float32{1, 2, 0.5, 4, 0.25, 8}
	sb := make([]byte, 3*2*2)
	if err := PackGPTQScales(sb, scales, 3, 2); err != nil {
		t.Fatal(err)
	}
	wantBits := []uint16{0x3C00, 0x3800, 0x3400, 0x4000, 0x4400, 0x4800}
	for i, b := range wantBits {
		if got := binary.LittleEndian.Uint16(sb[2*i:]); got != b {
			t.Errorf("scales[%d, %d] = %#04x, want %#04x", i/3, i%3, got, b)
		}
	}
	back := make([]float32, 6)
	if err := UnpackGPTQScales(back, sb, 3, 2); err != nil || !slices.Equal(back, scales) {
		t.Errorf("unpacked scales %v (%v), want %v", back, err, scales)
	}

	// g_idx = k / g.
	gi := make([]byte, 8*4)
	if err := PutGPTQGIdx(gi, 8, 4); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 8; k++ {
		if got := binary.LittleEndian.Uint32(gi[4*k:]); got != uint32(k/4) {
			t.Errorf("g_idx[%d] = %d, want %d", k, got, k/4)
		}
	}
}

func TestTinygemmPortableExample(t *testing.T) {
	codes := []uint8{1, 2, 3, 4, 15, 0, 7, 8}
	got := make([]byte, 4)
	if err := PackTinygemm(got, codes, 2, 4); err != nil {
		t.Fatal(err)
	}
	// k even in the low nibble.
	if want := []byte{0x21, 0x43, 0x0F, 0x87}; !bytes.Equal(got, want) {
		t.Fatalf("bytes % x, want % x", got, want)
	}
}

// torchPack transcribes weight_to_int4pack_kernel (docs/formats.md#tinygemm-layout) loop
// for loop: the independent reference for the kernel layouts.
func torchPack(w []uint8, n, k int, layout KernelLayout) []byte {
	blockN := 64
	if layout == LayoutAVX2 {
		blockN = 32
	}
	dstAll := make([]byte, n*k/2)
	for nb := 0; nb*blockN < n; nb++ {
		nStart := nb * blockN
		nbSize := min(blockN, n-nStart)
		src := w[nStart*k:]
		dst := dstAll[nb*k*blockN/2:]
		for kk := 0; kk < k; kk++ {
			switch {
			case nbSize == blockN && layout == LayoutAVX512:
				for d := 0; d < 16; d++ {
					val0, val1 := src[d*k+kk], src[(d+16)*k+kk]
					val2, val3 := src[(d+32)*k+kk], src[(d+48)*k+kk]
					dst[kk*32+d] = val2<<4 | val0
					dst[kk*32+16+d] = val3<<4 | val1
				}
			case nbSize == blockN && layout == LayoutAVX2:
				for d := 0; d < 16; d++ {
					val0, val1 := src[d*k+kk], src[(d+16)*k+kk]
					dst[kk*16+d] = val1<<4 | val0
				}
			default:
				for c := 0; c < nbSize; c += 2 {
					val0, val1 := src[c*k+kk], src[c*k+k+kk]
					dst[kk*nbSize/2+c/2] = val1<<4 | val0
				}
			}
		}
	}
	return dstAll
}

func TestTinygemmKernelExample(t *testing.T) {
	// AVX-512, N = 64 + a 16-channel tail, K = 4.
	const n, k = 80, 4
	codes := make([]uint8, n*k)
	for c := 0; c < n; c++ {
		for kk := 0; kk < k; kk++ {
			if c < 64 {
				codes[c*k+kk] = uint8((c/4 + kk) % 16)
			} else {
				codes[c*k+kk] = uint8((c + 5*kk) % 16)
			}
		}
	}
	got := make([]byte, n*k/2)
	if err := PackTinygemmKernel(got, codes, n, k, LayoutAVX512); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		at   int
		want byte
		why  string
	}{
		{0, 0x80, "k0 byte 0 = ch0 (0) | ch32 (8)<<4"},
		{16, 0xC4, "k0 byte 16 = ch16 (4) | ch48 (12)<<4"},
		{31, 0xF7, "k0 byte 31 = ch31 (7) | ch63 (15)<<4"},
		{32, 0x91, "k1 byte 0 = ch0 (1) | ch32 (9)<<4"},
		{128, 0x10, "tail k0 byte 0 = ch64 (0) | ch65 (1)<<4"},
		{129, 0x32, "tail k0 byte 1 = ch66 (2) | ch67 (3)<<4"},
		{136, 0x65, "tail k1 byte 0 = ch64 (5) | ch65 (6)<<4"},
	}
	for _, c := range checks {
		if got[c.at] != c.want {
			t.Errorf("byte %d = %#02x, want %#02x (%s)", c.at, got[c.at], c.want, c.why)
		}
	}
	if want := torchPack(codes, n, k, LayoutAVX512); !bytes.Equal(got, want) {
		t.Fatalf("AVX-512 layout differs from weight_to_int4pack_kernel\n got % x\nwant % x", got, want)
	}
}

func TestPackRoundTrips(t *testing.T) {
	shapes := []struct{ n, k int }{{16, 8}, {32, 16}, {48, 40}, {64, 24}, {80, 16}, {96, 8}, {112, 32}, {128, 136}, {208, 64}}
	for _, sh := range shapes {
		codes := randomCodes(sh.n, sh.k, uint64(sh.n*1000+sh.k))
		back := make([]uint8, len(codes))
		packed := make([]byte, sh.n*sh.k/2)
		name := fmt.Sprintf("%dx%d", sh.n, sh.k)

		if err := PackGPTQQWeight(packed, codes, sh.n, sh.k); err != nil {
			t.Fatal(name, err)
		}
		clear(back)
		if err := UnpackGPTQQWeight(back, packed, sh.n, sh.k); err != nil || !slices.Equal(back, codes) {
			t.Errorf("%s: GPTQ qweight round trip failed (%v)", name, err)
		}
		// Spot-check the definition: nibble j of word [r, n] = code (8r+j, n).
		for i := 0; i < 20; i++ {
			r, c, j := i%(sh.k/8), (i*7)%sh.n, i%8
			word := binary.LittleEndian.Uint32(packed[4*(r*sh.n+c):])
			if got := uint8(word>>(4*j)) & 15; got != codes[c*sh.k+8*r+j] {
				t.Fatalf("%s: qweight[%d, %d] nibble %d = %d, want %d", name, r, c, j, got, codes[c*sh.k+8*r+j])
			}
		}

		if err := PackTinygemm(packed, codes, sh.n, sh.k); err != nil {
			t.Fatal(name, err)
		}
		for i := 0; i < len(codes); i += 2 {
			if packed[i/2] != codes[i]|codes[i+1]<<4 {
				t.Fatalf("%s: portable byte %d = %#x", name, i/2, packed[i/2])
			}
		}
		clear(back)
		if err := UnpackTinygemm(back, packed, sh.n, sh.k); err != nil || !slices.Equal(back, codes) {
			t.Errorf("%s: tinygemm portable round trip failed (%v)", name, err)
		}

		for _, layout := range []KernelLayout{LayoutAVX512, LayoutAVX2} {
			if err := PackTinygemmKernel(packed, codes, sh.n, sh.k, layout); err != nil {
				t.Fatal(name, layout, err)
			}
			if want := torchPack(codes, sh.n, sh.k, layout); !bytes.Equal(packed, want) {
				t.Errorf("%s %v: layout differs from weight_to_int4pack_kernel", name, layout)
			}
			clear(back)
			if err := UnpackTinygemmKernel(back, packed, sh.n, sh.k, layout); err != nil || !slices.Equal(back, codes) {
				t.Errorf("%s %v: round trip failed (%v)", name, layout, err)
			}
		}
	}
}

func TestTinygemmScalesZeros(t *testing.T) {
	// per-row [N=2, groups=2] -> [groups, N, 2] (scale, zero) in bf16.
	scales := []float32{0.5, 0.25, 2, 4}
	zeros := []float32{-1, 1, 0.125, -0.125}
	buf := make([]byte, 2*2*2*2)
	if err := PackTinygemmScalesZeros(buf, scales, zeros, 2, 2, ScaleBF16); err != nil {
		t.Fatal(err)
	}
	// [g0: (0.5,-1) (2,0.125)] [g1: (0.25,1) (4,-0.125)]
	want := []uint16{0x3F00, 0xBF80, 0x4000, 0x3E00, 0x3E80, 0x3F80, 0x4080, 0xBE00}
	for i, b := range want {
		if got := binary.LittleEndian.Uint16(buf[2*i:]); got != b {
			t.Errorf("value %d = %#04x, want %#04x", i, got, b)
		}
	}
	s2, z2 := make([]float32, 4), make([]float32, 4)
	if err := UnpackTinygemmScalesZeros(s2, z2, buf, 2, 2, ScaleBF16); err != nil ||
		!slices.Equal(s2, scales) || !slices.Equal(z2, zeros) {
		t.Errorf("round trip %v %v (%v)", s2, z2, err)
	}
}

func TestPackErrors(t *testing.T) {
	codes := make([]uint8, 16*12)
	buf := make([]byte, 16*12/2)
	if err := PackGPTQQWeight(buf, codes, 16, 12); err == nil {
		t.Error("GPTQ accepted K=12 (not a multiple of 8)")
	}
	if err := PackTinygemmKernel(buf, codes[:8*24], 8, 24, LayoutAVX512); err == nil {
		t.Error("kernel layout accepted N=8 (not a multiple of 16)")
	}
	if err := PackTinygemm(buf[:5], codes, 16, 12); err == nil {
		t.Error("short destination accepted")
	}
	if err := PackTinygemmKernel(buf, codes, 16, 12, KernelLayout(7)); err == nil {
		t.Error("unknown layout accepted")
	}
}

// FuzzUnpackPack: any bytes are a valid packed tensor; unpacking and
// packing again must reproduce them exactly, for every layout.
func FuzzUnpackPack(f *testing.F) {
	f.Add([]byte{0x10, 0x32, 0x54, 0x76, 0xEF, 0xCD, 0xAB, 0x89}, uint8(0), uint8(1))
	f.Add(bytes.Repeat([]byte{0x77, 0x80}, 32*5), uint8(2), uint8(3))
	f.Add(bytes.Repeat([]byte{0xF1}, 40*8), uint8(3), uint8(0))
	f.Add(bytes.Repeat([]byte{0x3C, 0xA5}, 40*8), uint8(4), uint8(1))
	f.Add(bytes.Repeat([]byte{0x5A, 0x0F}, 40*8), uint8(5), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, kind, kSel uint8) {
		k := 8 * (1 + int(kSel%4)) // 8..32
		var n int
		switch kind % 6 {
		case 0, 4: // GPTQ qweight, compressed-tensors weight_packed: any N
			n = len(data) * 2 / k
		case 5: // compressed-tensors weight_zero_point: N % 8 == 0 (k plays the groups)
			n = len(data) * 2 / k / 8 * 8
		default: // tinygemm layouts need N % 16 == 0
			n = len(data) * 2 / k / 16 * 16
		}
		if n == 0 {
			return
		}
		packed := data[:n*k/2]
		codes := make([]uint8, n*k)
		again := make([]byte, len(packed))
		var err error
		switch kind % 6 {
		case 0:
			if err = UnpackGPTQQWeight(codes, packed, n, k); err == nil {
				err = PackGPTQQWeight(again, codes, n, k)
			}
		case 4:
			if err = UnpackCTWeight(codes, packed, n, k); err == nil {
				err = PackCTWeight(again, codes, n, k)
			}
		case 5:
			if err = UnpackCTZeros(codes, packed, n, k); err == nil {
				err = PackCTZeros(again, codes, n, k)
			}
		case 1:
			if err = UnpackTinygemm(codes, packed, n, k); err == nil {
				err = PackTinygemm(again, codes, n, k)
			}
		default:
			layout := KernelLayout(kind%6 - 2)
			if err = UnpackTinygemmKernel(codes, packed, n, k, layout); err == nil {
				err = PackTinygemmKernel(again, codes, n, k, layout)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, packed) {
			t.Fatalf("kind %d n=%d k=%d: repacked bytes differ", kind%6, n, k)
		}
		for _, c := range codes {
			if c > 15 {
				t.Fatalf("unpacked code %d > 15", c)
			}
		}
	})
}
