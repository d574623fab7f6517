package qnnbundle

import (
	"testing"

	"sparkconv/qnn"
)

func TestEncodedRange(t *testing.T) {
	r, ok := EncodedRange(qnn.AsymmetricEncoding("a", 16, -2, 6))
	if !ok || r[0] > -1.999 || r[0] < -2.001 || r[1] < 5.999 || r[1] > 6.001 {
		t.Fatalf("asymmetric [-2, 6]: %v %v", r, ok)
	}
	r, _ = EncodedRange(qnn.SymmetricEncoding("k", 8, []float64{127}))
	if r != [2]float64{-128, 127} {
		t.Fatalf("symmetric 8-bit absmax 127: %v", r)
	}
	if _, ok := EncodedRange(qnn.SymmetricEncoding("w", 8, []float64{1, 2})); ok {
		t.Fatal("per-channel encoding has a range")
	}
}

func TestOverflowScan(t *testing.T) {
	enc := &qnn.Encodings{Activations: []qnn.Encoding{
		qnn.AsymmetricEncoding("x", 16, -1, 4),
		qnn.AsymmetricEncoding("y", 16, -2, 2),
		qnn.AsymmetricEncoding("mask", 16, -50, 0),
		qnn.AsymmetricEncoding("z", 16, 0, 1),
	}}
	s := newOverflowScan(enc, map[string]bool{"mask": true})
	s.add("x", []float32{3, -0.5}, 0, 1) // inside
	s.add("x", []float32{6, -1.5}, 1, 7) // 1.5x on both sides: the first
	s.add("x", []float32{2, -3}, 2, 9)   // 3x below
	s.add("y", []float32{5, 0}, 0, 4)    // 2.5x above
	s.add("mask", []float32{-1e4}, 0, 0) // skipped
	s.add("z", []float32{0.5, -1}, 0, 0) // below a range whose low end is 0: not a multiple
	s.add("other", []float32{1e9}, 0, 0) // no encoding
	got, n := s.result(1)
	if n != 2 || len(got) != 1 {
		t.Fatalf("%d overflowing, %d listed: %+v", n, len(got), got)
	}
	w := got[0]
	if w.Tensor != "x" || w.Times != 3 || w.Value != -3 || w.Seq != 2 || w.Pos != 9 {
		t.Fatalf("worst: %+v", w)
	}
	all, _ := s.result(5)
	if len(all) != 2 || all[1].Tensor != "y" || all[1].Times != 2.5 || all[1].Pos != 4 {
		t.Fatalf("all: %+v", all)
	}
}
