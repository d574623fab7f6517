// Package rotate writes a Spark checkpoint whose residual stream is
// multiplied by an orthogonal matrix Q (QuaRot's and SpinQuant's R1): the
// same network in exact arithmetic, with the residual's outlier channels
// (an attention sink's one-hot row, a channel that dominates every token)
// spread over all channels, so int8 activations and int4 weights lose less.
//
// Every RMSNorm's weight is folded into the linears that read its output
// and the norm becomes 1; then embed_tokens becomes E·Q, every linear that
// reads the residual (q_k_v_proj, g_proj, gate_proj, up_proj, the head)
// W·diag(w)·Q, and every linear that writes into it (o_proj, down_proj)
// Qᵀ·W. RMSNorm with unit weight commutes with Q because ‖xQ‖ = ‖x‖. The
// head is untied: lm_head = E·diag(w_final)·Q. The output is a plain Spark
// checkpoint every command and consumer takes unchanged; no rotation runs
// online. Q is a randomized Hadamard matrix diag(s)·H/√n (s seeded ±1) when
// a Hadamard matrix of the hidden size can be built as a Sylvester power of
// two times a Paley order (2048 = 2^11; 576 = 8 x 72), otherwise a seeded
// random orthogonal matrix (Gram-Schmidt of a Gaussian matrix).
package rotate

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Rotation is an orthogonal n x n matrix and how it was made.
type Rotation struct {
	N    int
	Kind string // "randomized-hadamard" or "random-orthogonal"
	// Construction names the Hadamard factors ("sylvester-8 x paley-72"),
	// empty for a random orthogonal matrix.
	Construction string
	Seed         uint64
	Q            []float32 // row-major [n, n]
}

// New returns the rotation of order n for seed.
func New(n int, seed uint64) (*Rotation, error) {
	if n < 1 {
		return nil, fmt.Errorf("rotation of order %d", n)
	}
	r := rand.New(rand.NewPCG(seed, 0x5eed0f0e))
	if h, name := Hadamard(n); h != nil {
		q := make([]float32, n*n)
		inv := 1 / math.Sqrt(float64(n))
		for i := range n {
			s := 1.0
			if r.IntN(2) == 1 {
				s = -1
			}
			for j := range n {
				q[i*n+j] = float32(s * float64(h[i*n+j]) * inv)
			}
		}
		return &Rotation{N: n, Kind: "randomized-hadamard", Construction: name, Seed: seed, Q: q}, nil
	}
	return &Rotation{N: n, Kind: "random-orthogonal", Seed: seed, Q: randomOrthogonal(n, r)}, nil
}

// Transposed returns Qᵀ.
func (r *Rotation) Transposed() []float32 {
	n := r.N
	t := make([]float32, n*n)
	for i := range n {
		for j := range n {
			t[j*n+i] = r.Q[i*n+j]
		}
	}
	return t
}

// String describes the rotation in one line.
func (r *Rotation) String() string {
	if r.Construction != "" {
		return fmt.Sprintf("%s %d (%s), seed %d", r.Kind, r.N, r.Construction, r.Seed)
	}
	return fmt.Sprintf("%s %d, seed %d", r.Kind, r.N, r.Seed)
}

// Hadamard returns a Hadamard matrix of order n (entries ±1, H·Hᵀ = n·I)
// and its construction: Sylvester's for a power of two, else Sylvester's
// 2^a times Paley's q+1 for the smallest a with q = n/2^a - 1 a prime
// ≡ 3 (mod 4); nil when no such a exists.
func Hadamard(n int) ([]int8, string) {
	if n > 0 && n&(n-1) == 0 {
		return sylvester(n), fmt.Sprintf("sylvester-%d", n)
	}
	for a := 0; 1<<a <= n; a++ {
		p := 1 << a
		if n%p != 0 {
			break
		}
		m := n / p
		if q := m - 1; q%4 == 3 && isPrime(q) {
			name := fmt.Sprintf("paley-%d", m)
			if p > 1 {
				name = fmt.Sprintf("sylvester-%d x %s", p, name)
			}
			return kron(sylvester(p), p, paley(q), m), name
		}
	}
	return nil, ""
}

// sylvester is the Sylvester Hadamard matrix of order p (a power of two):
// H[i][j] = (-1)^popcount(i & j).
func sylvester(p int) []int8 {
	h := make([]int8, p*p)
	for i := range p {
		for j := range p {
			h[i*p+j] = 1
			if bitsOdd(i & j) {
				h[i*p+j] = -1
			}
		}
	}
	return h
}

func bitsOdd(x int) bool {
	odd := false
	for ; x != 0; x &= x - 1 {
		odd = !odd
	}
	return odd
}

// paley is Paley's first construction of order q+1 for a prime q ≡ 3
// (mod 4): H = I + [[0, 1ᵀ], [-1, J]] with J the Jacobsthal matrix
// J[i][j] = χ(j - i), χ the quadratic character mod q.
func paley(q int) []int8 {
	m := q + 1
	chi := make([]int8, q)
	for x := 1; x < q; x++ {
		chi[x*x%q] = 1
	}
	for x := 1; x < q; x++ {
		if chi[x] == 0 {
			chi[x] = -1
		}
	}
	h := make([]int8, m*m)
	for j := 1; j < m; j++ {
		h[j] = 1     // first row
		h[j*m] = -1  // first column
		h[j*m+j] = 1 // identity (J's diagonal is 0)
		for k := 1; k < m; k++ {
			if k != j {
				h[j*m+k] = chi[((k-j)%q+q)%q]
			}
		}
	}
	h[0] = 1
	return h
}

// kron is the Kronecker product of a (order p) and b (order m).
func kron(a []int8, p int, b []int8, m int) []int8 {
	n := p * m
	h := make([]int8, n*n)
	for i := range p {
		for j := range p {
			for k := range m {
				for l := range m {
					h[(i*m+k)*n+j*m+l] = a[i*p+j] * b[k*m+l]
				}
			}
		}
	}
	return h
}

func isPrime(q int) bool {
	if q < 2 {
		return false
	}
	for d := 2; d*d <= q; d++ {
		if q%d == 0 {
			return false
		}
	}
	return true
}

// randomOrthogonal is the modified Gram-Schmidt orthonormalization, in
// float64, of a seeded Gaussian n x n matrix (its rows).
func randomOrthogonal(n int, r *rand.Rand) []float32 {
	a := make([]float64, n*n)
	for i := range a {
		a[i] = r.NormFloat64()
	}
	for i := range n {
		ri := a[i*n : (i+1)*n]
		for j := range i {
			rj := a[j*n : (j+1)*n]
			d := 0.0
			for k := range n {
				d += ri[k] * rj[k]
			}
			for k := range n {
				ri[k] -= d * rj[k]
			}
		}
		norm := 0.0
		for _, v := range ri {
			norm += v * v
		}
		norm = math.Sqrt(norm)
		for k := range ri {
			ri[k] /= norm
		}
	}
	q := make([]float32, n*n)
	for i, v := range a {
		q[i] = float32(v)
	}
	return q
}
