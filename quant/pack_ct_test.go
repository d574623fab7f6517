package quant

import (
	"bytes"
	"encoding/hex"
	"math/rand/v2"
	"testing"
)

// TestPackCT: compressed-tensors' nibble order (value j of a word in bits
// 4j, little-endian int32) on a known word, and both layouts round-trip.
func TestPackCT(t *testing.T) {
	codes := []uint8{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	dst := make([]byte, 8)
	if err := PackCTWeight(dst, codes, 1, 16); err != nil {
		t.Fatal(err)
	}
	if got, want := hex.EncodeToString(dst), "10325476"+"98badcfe"; got != want {
		t.Errorf("weight_packed bytes %s, want %s (int32 0x76543210, 0xfedcba98)", got, want)
	}
	// Zero points [N=8, groups=2] pack along N: word g holds column g.
	zeros := make([]uint8, 16)
	for n := range 8 {
		zeros[n*2], zeros[n*2+1] = uint8(n), uint8(15-n)
	}
	zp := make([]byte, 8)
	if err := PackCTZeros(zp, zeros, 8, 2); err != nil {
		t.Fatal(err)
	}
	if got, want := hex.EncodeToString(zp), "10325476"+"efcdab89"; got != want {
		t.Errorf("weight_zero_point bytes %s, want %s", got, want)
	}
	r := rand.New(rand.NewPCG(1, 2))
	n, k, groups := 24, 64, 4
	c := make([]uint8, n*k)
	z := make([]uint8, n*groups)
	for i := range c {
		c[i] = uint8(r.IntN(16))
	}
	for i := range z {
		z[i] = uint8(r.IntN(16))
	}
	pw, pz := make([]byte, n*k/2), make([]byte, n*groups/2)
	if err := PackCTWeight(pw, c, n, k); err != nil {
		t.Fatal(err)
	}
	if err := PackCTZeros(pz, z, n, groups); err != nil {
		t.Fatal(err)
	}
	c2, z2 := make([]uint8, n*k), make([]uint8, n*groups)
	if err := UnpackCTWeight(c2, pw, n, k); err != nil {
		t.Fatal(err)
	}
	if err := UnpackCTZeros(z2, pz, n, groups); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c, c2) || !bytes.Equal(z, z2) {
		t.Error("pack-quantized round trip changed codes or zero points")
	}
	if err := PackCTWeight(pw[:10], c, n, k); err == nil {
		t.Error("a short weight_packed buffer was accepted")
	}
	if err := PackCTZeros(make([]byte, 6), make([]uint8, 12), 6, 2); err == nil {
		t.Error("N = 6 (not a multiple of 8) was accepted for weight_zero_point")
	}
}
