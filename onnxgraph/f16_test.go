package onnxgraph

import (
	"bytes"
	"encoding/binary"
	"testing"

	"sparkconv/dtype"
)

// TestBF16ToF16Paths converts a matrix holding every bf16 bit pattern but
// the NaNs (inputs are checked finite before export), plain and
// transposed, at shapes with and without whole 8x8 tiles and 64-column
// bands, through the direct bf16 -> fp16 path and the portable one: the
// bytes must be the same.
func TestBF16ToF16Paths(t *testing.T) {
	var vals []uint16
	for b := range 1 << 16 {
		if uint16(b)&0x7fff <= 0x7f80 {
			vals = append(vals, uint16(b))
		}
	}
	for _, shape := range [][2]int{{256, 256}, {8, 64}, {3, 64}, {64, 100}, {13, 77}, {1, 8}} {
		rows, cols := shape[0], shape[1]
		raw := make([]byte, 2*rows*cols)
		for i := range rows * cols {
			binary.LittleEndian.PutUint16(raw[2*i:], vals[(i*7919)%len(vals)])
		}
		if rows*cols >= len(vals) {
			for i, v := range vals {
				binary.LittleEndian.PutUint16(raw[2*i:], v)
			}
		}
		for _, transpose := range []bool{false, true} {
			var d Data
			var err error
			if transpose {
				d, err = TransposeRaw(raw, dtype.BF16, Float16, rows, cols)
			} else {
				d, err = ConvertRaw(raw, dtype.BF16, Float16)
			}
			if err != nil {
				t.Fatal(err)
			}
			var fast, slow bytes.Buffer
			fastF16 = true
			if _, err := d.WriteTo(&fast); err != nil {
				t.Fatal(err)
			}
			fastF16 = false
			if _, err := d.WriteTo(&slow); err != nil {
				t.Fatal(err)
			}
			fastF16 = true
			if !bytes.Equal(fast.Bytes(), slow.Bytes()) || int64(fast.Len()) != d.Size() {
				t.Fatalf("[%d, %d] transpose=%v: direct path differs from the portable one", rows, cols, transpose)
			}
		}
	}
}
