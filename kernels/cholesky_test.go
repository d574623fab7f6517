package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

var cholSizes = []int{1, 2, 5, 31, 33, 127, 128, 129, 300}

// cholSizesLong adds a size with three 256-wide panels (and ragged
// recursive halves); skipped with -short.
func cholSizesLong() []int {
	if testing.Short() {
		return cholSizes
	}
	return append(cholSizes, 530)
}

func TestCholesky(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, n := range cholSizesLong() {
		a := randSPD(r, n)
		l := append([]float64(nil), a...)
		for i := range n { // the upper triangle must not be read
			for j := i + 1; j < n; j++ {
				l[i*n+j] = math.NaN()
			}
		}
		if err := Cholesky(l, n); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		for i := range n {
			if l[i*n+i] <= 0 {
				t.Fatalf("n=%d: diagonal %d is %g", n, i, l[i*n+i])
			}
			for j := i + 1; j < n; j++ {
				if l[i*n+j] != 0 {
					t.Fatalf("n=%d: upper element (%d,%d) = %g", n, i, j, l[i*n+j])
				}
			}
		}
		llt := matMul64(l, transpose64(l, n), n)
		var e float64
		for i := range llt {
			e = max(e, math.Abs(llt[i]-a[i]))
		}
		if e > 1e-12 {
			t.Errorf("n=%d: max |L L^T - A| = %.3g", n, e)
		}
	}
}

func TestCholeskyRejectsNonPD(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, tc := range []struct{ n, bad int }{{1, 0}, {5, 3}, {200, 150}} {
		a := randSPD(r, tc.n)
		// Make the leading (bad+1) x (bad+1) minor singular-negative: pivot
		// bad is the first one that fails.
		a[tc.bad*tc.n+tc.bad] = -1
		err := Cholesky(a, tc.n)
		if err == nil {
			t.Fatalf("n=%d: no error for a matrix with a negative diagonal", tc.n)
		}
		if want := "pivot " + itoa(tc.bad) + " of"; !strings.Contains(err.Error(), want) {
			t.Errorf("n=%d: error %q does not name %q", tc.n, err, want)
		}
	}
	nan := []float64{1, 0, 0, math.NaN()}
	if err := Cholesky(nan, 2); err == nil {
		t.Error("NaN pivot accepted")
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

func TestTriInverseLower(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, n := range cholSizes {
		l := randSPD(r, n)
		if err := Cholesky(l, n); err != nil {
			t.Fatal(err)
		}
		x := append([]float64(nil), l...)
		if err := TriInverseLower(x, n); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			for j := i + 1; j < n; j++ {
				if x[i*n+j] != 0 {
					t.Fatalf("n=%d: inverse not lower at (%d,%d)", n, i, j)
				}
			}
		}
		if e := maxAbsDiffIdentity(matMul64(l, x, n), n); e > 1e-10 {
			t.Errorf("n=%d: max |L L^-1 - I| = %.3g", n, e)
		}
	}
	if err := TriInverseLower([]float64{1, 0, 2, 0}, 2); err == nil || !strings.Contains(err.Error(), "diagonal element 1") {
		t.Errorf("singular triangle: err = %v", err)
	}
}

func TestCholeskyInverse(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	for _, n := range cholSizes {
		a := randSPD(r, n)
		l := append([]float64(nil), a...)
		if err := Cholesky(l, n); err != nil {
			t.Fatal(err)
		}
		if err := CholeskyInverse(l, n); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			for j := range i {
				if l[i*n+j] != l[j*n+i] {
					t.Fatalf("n=%d: inverse not symmetric at (%d,%d)", n, i, j)
				}
			}
		}
		if e := maxAbsDiffIdentity(matMul64(a, l, n), n); e > 1e-9 {
			t.Errorf("n=%d: max |A A^-1 - I| = %.3g", n, e)
		}
	}
}

// TestCholeskyUpperInverse checks the GPTQ factor against its definition
// (U upper, U^T U = H^-1) and against the three-step torch recipe
// cholesky(cholesky_inverse(cholesky(H)), upper=True) built from the other
// functions.
func TestCholeskyUpperInverse(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	for _, n := range cholSizesLong() {
		h := randSPD(r, n)
		u := append([]float64(nil), h...)
		if err := CholeskyUpperInverse(u, n); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if u[i*n+i] <= 0 {
				t.Fatalf("n=%d: diagonal %d = %g", n, i, u[i*n+i])
			}
			for j := range i {
				if u[i*n+j] != 0 {
					t.Fatalf("n=%d: U not upper at (%d,%d)", n, i, j)
				}
			}
		}
		// U^T U H = I
		if e := maxAbsDiffIdentity(matMul64(matMul64(transpose64(u, n), u, n), h, n), n); e > 1e-9 {
			t.Errorf("n=%d: max |U^T U H - I| = %.3g", n, e)
		}
		// Three-step recipe: L = chol(H); Hinv = L^-T L^-1; U' = chol(Hinv)^T.
		ref := append([]float64(nil), h...)
		if err := Cholesky(ref, n); err != nil {
			t.Fatal(err)
		}
		if err := CholeskyInverse(ref, n); err != nil {
			t.Fatal(err)
		}
		if err := Cholesky(ref, n); err != nil {
			t.Fatal(err)
		}
		ref = transpose64(ref, n)
		var e, s float64
		for i := range ref {
			e = max(e, math.Abs(ref[i]-u[i]))
			s = max(s, math.Abs(ref[i]))
		}
		if e > 1e-10*s {
			t.Errorf("n=%d: max |U - U_torch-recipe| = %.3g (scale %.3g)", n, e, s)
		}
	}
	bad := []float64{1, 2, 2, 1}
	if err := CholeskyUpperInverse(bad, 2); err == nil {
		t.Error("indefinite matrix accepted")
	}
}

// TestSymmetrizeLower checks the mirror of the strict lower triangle,
// whole 8x8 blocks and ragged edges, on the active kernels and the
// portable ones: every upper element becomes its lower twin, bit for bit,
// and the lower triangle stays.
func TestSymmetrizeLower(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	run := func(t *testing.T) {
		for _, n := range []int{1, 2, 7, 8, 9, 16, 63, 64, 65, 72, 130, 200} {
			a := make([]float64, n*n)
			for i := range a {
				a[i] = r.NormFloat64()
			}
			want := slices.Clone(a)
			for i := range n {
				for j := range i {
					want[j*n+i] = want[i*n+j]
				}
			}
			SymmetrizeLower(a, n)
			for i := range a {
				if math.Float64bits(a[i]) != math.Float64bits(want[i]) {
					t.Fatalf("n=%d: element (%d,%d) = %v, want %v", n, i/n, i%n, a[i], want[i])
				}
			}
		}
	}
	t.Run(Active(), run)
	t.Run("portable", func(t *testing.T) {
		defer usePortable()()
		run(t)
	})
}
