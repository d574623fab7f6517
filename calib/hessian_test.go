package calib

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestHessian: each setting of the accumulator sums exactly the rows it
// keeps (against a float64 sum written here), holds out every HoldOut-th
// row up to MaxHeld, and counts its tokens.
func TestHessian(t *testing.T) {
	const k, calls, rows = 24, 7, 33
	rng := rand.New(rand.NewPCG(1, 2))
	xs := make([][]float32, calls)
	for c := range xs {
		xs[c] = make([]float32, rows*k)
		for i := range xs[c] {
			xs[c][i] = float32(rng.NormFloat64())
		}
	}
	for _, tc := range []struct {
		name                     string
		holdOut, maxHeld, gather int
		wantHeld                 int
	}{
		{"direct", 0, 0, 0, 0},
		{"gathered", 0, 0, 100, 0},
		{"held out", 10, 1000, 0, calls * rows / 10},
		{"held out, capped", 10, 5, 64, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHessian(k)
			h.HoldOut, h.MaxHeld, h.Gather = tc.holdOut, tc.maxHeld, tc.gather
			want := make([]float64, k*k)
			held, seen := 0, 0
			for _, x := range xs {
				h.Add(x, rows)
				for r := range rows {
					if tc.holdOut > 0 && seen%tc.holdOut == tc.holdOut-1 && held < tc.maxHeld {
						held++
					} else {
						row := x[r*k : (r+1)*k]
						for a := range k {
							for b := range k {
								want[a*k+b] += float64(row[a]) * float64(row[b])
							}
						}
					}
					seen++
				}
			}
			h.Finish()
			if h.HeldRows() != tc.wantHeld || held != tc.wantHeld {
				t.Fatalf("held %d rows (reference %d), want %d", h.HeldRows(), held, tc.wantHeld)
			}
			if got := h.Tokens + int64(h.HeldRows()); got != calls*rows {
				t.Errorf("tokens %d + held %d != %d rows", h.Tokens, h.HeldRows(), calls*rows)
			}
			for i, v := range want {
				if math.Abs(h.H[i]-v) > 1e-4*(1+math.Abs(v)) {
					t.Fatalf("H[%d] = %g, want %g", i, h.H[i], v)
				}
			}
		})
	}
}

// TestPrefix: the first n tokens of the chunks, the last chunk cut short.
func TestPrefix(t *testing.T) {
	chunks := []Chunk{{Sample: 0, IDs: []int{1, 2, 3}}, {Sample: 1, IDs: []int{4, 5}}, {Sample: 2, IDs: []int{6}}}
	for _, tc := range []struct {
		n, wantChunks, wantTokens int
		last                      []int
	}{
		{0, 0, 0, nil},
		{2, 1, 2, []int{1, 2}},
		{3, 1, 3, []int{1, 2, 3}},
		{4, 2, 4, []int{4}},
		{99, 3, 6, []int{6}},
	} {
		got, n := Prefix(chunks, tc.n)
		if len(got) != tc.wantChunks || n != tc.wantTokens {
			t.Errorf("Prefix(%d): %d chunks, %d tokens; want %d, %d", tc.n, len(got), n, tc.wantChunks, tc.wantTokens)
			continue
		}
		if len(got) > 0 && !slices.Equal(got[len(got)-1].IDs, tc.last) {
			t.Errorf("Prefix(%d): last chunk %v, want %v", tc.n, got[len(got)-1].IDs, tc.last)
		}
	}
}
