package calib

import (
	"math"
	"math/rand/v2"
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
		withRef                  bool // rows come with a reference (AddRef)
	}{
		{"direct", 0, 0, 0, 0, false},
		{"gathered", 0, 0, 100, 0, false},
		{"held out", 10, 1000, 0, calls * rows / 10, false},
		{"held out, capped", 10, 5, 64, 5, false},
		{"with reference, held out", 10, 1000, 64, calls * rows / 10, true},
		{"with reference, direct", 0, 0, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHessian(k)
			h.HoldOut, h.MaxHeld, h.Gather = tc.holdOut, tc.maxHeld, tc.gather
			withRef := tc.withRef
			want, wantCross := make([]float64, k*k), make([]float64, k*k)
			held, seen := 0, 0
			for c, x := range xs {
				ref := xs[(c+1)%calls] // any other rows will do
				if withRef {
					h.AddRef(x, ref, rows)
				} else {
					h.Add(x, rows)
				}
				for r := range rows {
					if tc.holdOut > 0 && seen%tc.holdOut == tc.holdOut-1 && held < tc.maxHeld {
						held++
					} else {
						row, rr := x[r*k:(r+1)*k], ref[r*k:(r+1)*k]
						for a := range k {
							for b := range k {
								want[a*k+b] += float64(row[a]) * float64(row[b])
								wantCross[a*k+b] += (float64(rr[a]) - float64(row[a])) * float64(row[b])
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
			if !withRef {
				if h.Cross != nil {
					t.Fatalf("Cross made without a reference")
				}
				return
			}
			for i, v := range wantCross {
				if math.Abs(float64(h.Cross[i])-v) > 1e-4*(1+math.Abs(v)) {
					t.Fatalf("Cross[%d] = %g, want %g", i, h.Cross[i], v)
				}
			}
		})
	}
}
