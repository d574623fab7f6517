package qnn

import (
	"math"
	"strings"
	"testing"
)

// lpbqCase is a small LPBQ grid: 2 blocks of 4 rows, 3 channels.
func lpbqCase() BlockScales {
	return BlockScales{K: 8, N: 3, Block: 4, CompressedBW: 4, BW: 8,
		Scale: []float32{0.01, 0.02, 0.005},
		Int:   []int32{16, 3, 1, 16, 7, 12}}
}

// TestLPBQEncodingRoundTrip writes an LPBQ entry in AIMET 1.0.0's form and
// reads it back.
func TestLPBQEncodingRoundTrip(t *testing.T) {
	s := lpbqCase()
	f := &Encodings{Version: EncodingsVersion, Activations: []Encoding{}, Params: []Encoding{s.Encoding("w")}, ExcludedLayers: []string{}}
	data, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"enc_type": "LPBQ"`, `"compressed_bw": 4`, `"bw": 8`, `"block_size": 4`, `"is_sym": true`, `"per_block_int_scale": [`, `-128`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("encodings lack %s:\n%s", want, data)
		}
	}
	back, err := ParseEncodings(data)
	if err != nil {
		t.Fatal(err)
	}
	e := back.Params[0]
	if !e.Same(f.Params[0]) || len(e.Offset) != 3 || e.Offset[2] != -128 {
		t.Fatalf("round trip: %+v", e)
	}
	got, err := BlockScalesOf(e, 8, 3)
	if err != nil || got.BlockScale(1, 1) != float64(float32(0.02))*16 || got.Blocks() != 2 {
		t.Errorf("BlockScalesOf: %+v, %v", got, err)
	}
	if _, err := BlockScalesOf(e, 6, 3); err == nil || !strings.Contains(err.Error(), "does not divide") {
		t.Errorf("block size 4 on 6 rows: %v", err)
	}
	if p := e.Problems(true); len(p) != 0 {
		t.Errorf("a good LPBQ entry: %v", p)
	}
	// A per-channel grid with the same scales is another grid.
	pc := SymmetricEncoding("w", 8, []float64{1, 2, 3})
	pc.Scale, pc.Offset = e.Scale, e.Offset
	if pc.Same(e) {
		t.Error("PER_CHANNEL and LPBQ entries compare equal")
	}
}

func TestLPBQProblems(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(*Encoding)
		param bool
		want  string
	}{
		{"activation", func(e *Encoding) {}, false, "LPBQ on an activation"},
		{"asymmetric", func(e *Encoding) { e.IsSym = false }, true, "must be symmetric"},
		{"compressed 8", func(e *Encoding) { e.CompressedBW = 8; e.BW = 16 }, true, "compressed_bw 8 and bw 16"},
		{"int 0", func(e *Encoding) { e.PerBlockIntScale[2] = 0 }, true, "per_block_int_scale[2] = 0 outside [1, 16]"},
		{"int 17", func(e *Encoding) { e.PerBlockIntScale[5] = 17 }, true, "per_block_int_scale[5] = 17"},
		{"block 0", func(e *Encoding) { e.BlockSize = 0 }, true, "block_size 0"},
		{"ragged", func(e *Encoding) { e.PerBlockIntScale = e.PerBlockIntScale[:5] }, true, "5 per_block_int_scale entries for 3 channel scales"},
		{"offset", func(e *Encoding) { e.Offset[0] = -8 }, true, "symmetric offset[0] = -8"},
	}
	for _, c := range cases {
		e := lpbqCase().Encoding("w")
		c.edit(&e)
		p := strings.Join(e.Problems(c.param), "; ")
		if !strings.Contains(p, c.want) {
			t.Errorf("%s: problems %q, want %q", c.name, p, c.want)
		}
	}
}

// TestLPBQDequantize holds Dequantize to codes x int scale x channel
// scale, computed here from the definition.
func TestLPBQDequantize(t *testing.T) {
	s := lpbqCase()
	w := make([]float32, s.K*s.N)
	for i := range w {
		w[i] = float32(math.Sin(float64(i)*1.7)) * 0.9
	}
	w[5] = 5 // past every block's range: clamps to 7
	got := s.Dequantize(w)
	for r := range s.K {
		for j := range s.N {
			b := r / s.Block
			in := s.Int[j*2+b]
			step := float64(s.Scale[j]) * float64(in)
			q := math.Max(-8, math.Min(7, math.RoundToEven(float64(w[r*s.N+j])/step)))
			code := s.Code(w[r*s.N+j], j, b)
			if code != int32(q)*in || code%in != 0 || code < -128 || code > 112 {
				t.Errorf("[%d,%d]: code %d, want %d x %d", r, j, code, int32(q), in)
			}
			want := float32(int32(q)*in) * s.Scale[j]
			if got[r*s.N+j] != want || math.Abs(float64(want)-q*step) > 1e-6*math.Abs(q*step) {
				t.Errorf("[%d,%d]: %v, want %v (q %v x int %d x scale %v)", r, j, got[r*s.N+j], want, q, in, s.Scale[j])
			}
		}
	}
	if got[5] != float32(7*7)*0.005 { // row 1, channel 2: block 0, int 7
		t.Errorf("clamped weight: %v", got[5])
	}
}

// blockDiagErr is Σ_b d_bᵀ H_bb d_b of d = w - deq, computed directly.
func blockDiagErr(w, deq []float32, k, n int, h []float64, block int) float64 {
	var total float64
	for j := range n {
		for r := range k {
			b0 := (r / block) * block
			for c := b0; c < b0+block; c++ {
				total += float64(w[r*n+j]-deq[r*n+j]) * h[r*k+c] * float64(w[c*n+j]-deq[c*n+j])
			}
		}
	}
	return total
}

// fullErr is (w - deq)ᵀ H (w - deq) summed over the channels.
func fullErr(w, deq []float32, k, n int, h []float64) float64 {
	return blockDiagErr(w, deq, k, n, h, k)
}

// TestSearchBlocks: the chosen grid errs no more than AIMET's min-max LPBQ
// grid on every weight, Err is what the grid written gives, the refinement
// errs no more than the grid it starts from, and blocks of 32 beat the
// per-channel search in the full H-weighted error.
func TestSearchBlocks(t *testing.T) {
	for _, c := range []struct {
		k, n, rows, block int
		seed              uint64
		refine            bool
	}{{64, 8, 256, 32, 1, false}, {128, 24, 64, 32, 2, false}, {128, 5, 512, 64, 3, false},
		{64, 8, 256, 32, 1, true}, {128, 24, 64, 32, 2, true}, {128, 5, 512, 64, 3, true}} {
		w, h := searchCase(c.k, c.n, c.rows, c.seed)
		res := SearchBlocks(w, c.k, c.n, h, c.block, c.refine)
		s := res.Scales
		if s.K != c.k || s.N != c.n || len(s.Scale) != c.n || len(s.Int) != c.n*c.k/c.block {
			t.Fatalf("%+v: shapes %+v", c, s)
		}
		for _, v := range s.Int {
			if v < 1 || v > 16 {
				t.Fatalf("%+v: integer scale %d", c, v)
			}
		}
		if p := s.Encoding("w").Problems(true); len(p) != 0 {
			t.Errorf("%+v: %v", c, p)
		}
		if res.Err > res.AbsmaxErr {
			t.Errorf("%+v: error %g above min-max's %g", c, res.Err, res.AbsmaxErr)
		}
		got := blockDiagErr(w, s.Dequantize(w), c.k, c.n, h, c.block)
		if c.refine {
			got = fullErr(w, s.Dequantize(w), c.k, c.n, h)
			if plain := SearchBlocks(w, c.k, c.n, h, c.block, false).Scales; got > fullErr(w, plain.Dequantize(w), c.k, c.n, h) {
				t.Errorf("%+v: refined error %g above the unrefined grid's", c, got)
			}
		}
		if math.Abs(got-res.Err) > 1e-6*res.Err {
			t.Errorf("%+v: Err %g, the written grid gives %g", c, res.Err, got)
		}
		pc := SearchScales(w, c.k, c.n, h, 4)
		if full := fullErr(w, s.Dequantize(w), c.k, c.n, h); full >= pc.Err {
			t.Errorf("%+v: blocks of %d err %g, per channel %g", c, c.block, full, pc.Err)
		}
		t.Logf("%+v: min-max LPBQ %.4g, searched %.4g (%.2f dB), per-channel search %.4g, mean clip %.3f",
			c, res.AbsmaxErr, res.Err, 10*math.Log10(res.AbsmaxErr/res.Err), pc.Err, res.MeanClip)
	}
}

// TestLintLPBQ: lint --encodings takes an LPBQ entry that fits its MatMul
// weight and refuses one whose shapes or values do not.
func TestLintLPBQ(t *testing.T) {
	b := newTB(17)
	x := b.in("x", tF32, 1, 8)
	w := b.f32("w", []int64{8, 3}, make([]float32, 24)...)
	bias := b.f32("bias", []int64{3}, 1, 2, 3)
	b.opTo("y", "MatMul", []string{x, w})
	b.opTo("z", "Add", []string{"y", bias})
	b.out("z", tF32, 1, 3)
	acts := []Encoding{AsymmetricEncoding("x", 16, -1, 1), AsymmetricEncoding("y", 16, -1, 1), AsymmetricEncoding("z", 16, -1, 1)}
	cases := []struct {
		name string
		edit func(*Encoding)
		want string // "" accepts
	}{
		{"fits", func(e *Encoding) {}, ""},
		{"block 3", func(e *Encoding) { e.BlockSize = 3 }, "block_size 3 does not divide the weight's 8 input rows"},
		{"channels", func(e *Encoding) { e.Scale, e.Offset = e.Scale[:2], e.Offset[:2] }, "2 channel scales for a weight of 3 output channels"},
		{"blocks", func(e *Encoding) { e.BlockSize = 8 }, "6 per_block_int_scale entries, want 3"},
		{"int 20", func(e *Encoding) { e.PerBlockIntScale[0] = 20 }, "outside [1, 16]"},
		{"on a bias", func(e *Encoding) { e.Name = "bias" }, "LPBQ on a weight of dims [3]"},
	}
	for _, c := range cases {
		e := lpbqCase().Encoding("w")
		c.edit(&e)
		params := []Encoding{e}
		if e.Name != "w" {
			params = append(params, SymmetricEncoding("w", 8, []float64{1, 1, 1}))
		}
		var msgs []string
		for _, f := range LintEncodings(b.m, &Encodings{Version: EncodingsVersion, Activations: acts, Params: params}) {
			if f.Severity == Error {
				msgs = append(msgs, f.Rule+": "+f.Message)
			}
		}
		got := strings.Join(msgs, "; ")
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: errors %q, want %q", c.name, got, c.want)
		}
	}
}

// TestSolveBlocks: the solved weights lie on the LPBQ grid (Dequantize
// gives them back) and err less in the H-weighted output error than the
// grid's round to nearest, on inputs whose channels are correlated.
func TestSolveBlocks(t *testing.T) {
	for _, c := range []struct {
		k, n, rows int
		seed       uint64
	}{{128, 16, 512, 4}, {256, 8, 1024, 5}} {
		w, h := searchCase(c.k, c.n, c.rows, c.seed)
		// Correlate neighbouring input channels: x'_r = x_r + x_{r+1}.
		hc := make([]float64, c.k*c.k)
		at := func(a, b int) float64 {
			if a >= c.k || b >= c.k {
				return 0
			}
			return h[a*c.k+b]
		}
		for a := range c.k {
			for b := range c.k {
				hc[a*c.k+b] = at(a, b) + at(a+1, b) + at(a, b+1) + at(a+1, b+1)
			}
		}
		s := SearchBlocks(w, c.k, c.n, hc, 64, false).Scales
		solved, err := SolveBlocks(w, hc, s, SolveDamp)
		if err != nil {
			t.Fatal(err)
		}
		back := s.Dequantize(solved)
		for i := range solved {
			if back[i] != solved[i] {
				t.Fatalf("%+v: solved weight %d = %v is off the grid (%v)", c, i, solved[i], back[i])
			}
		}
		rtn, gptq := fullErr(w, s.Dequantize(w), c.k, c.n, hc), fullErr(w, solved, c.k, c.n, hc)
		if gptq >= rtn {
			t.Errorf("%+v: solved error %g, round to nearest %g", c, gptq, rtn)
		}
		t.Logf("%+v: round to nearest %.4g, solved %.4g (%.2f dB)", c, rtn, gptq, 10*math.Log10(rtn/gptq))
	}
}
