package quant

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"sparkconv/kernels"
)

// Matrix is a row-major weight matrix W[N, K] (N = out features, K = in
// features) given either as float32 values or as raw bfloat16 bits. Exactly
// one of F32 and BF16 holds N*K elements. Raw bf16 is widened one row at a
// time into a per-goroutine buffer, so no full-size float32 copy is made.
type Matrix struct {
	N, K int
	F32  []float32
	BF16 []uint16
}

// F32Matrix wraps float32 values w[N*K].
func F32Matrix(n, k int, w []float32) Matrix { return Matrix{N: n, K: k, F32: w} }

// BF16Matrix wraps raw bfloat16 bits w[N*K] (as read from safetensors).
func BF16Matrix(n, k int, w []uint16) Matrix { return Matrix{N: n, K: k, BF16: w} }

func (m Matrix) check() error {
	if m.N <= 0 || m.K <= 0 {
		return fmt.Errorf("quant: matrix shape [%d, %d] is empty", m.N, m.K)
	}
	if (m.F32 == nil) == (m.BF16 == nil) {
		return fmt.Errorf("quant: matrix [%d, %d] needs exactly one of F32 and BF16 data", m.N, m.K)
	}
	if got := max(len(m.F32), len(m.BF16)); got != m.N*m.K {
		return fmt.Errorf("quant: matrix [%d, %d] needs %d values, has %d", m.N, m.K, m.N*m.K, got)
	}
	return nil
}

// Row returns row n as float32: a view of F32, or bf16 widened into buf
// (len >= K).
func (m Matrix) Row(n int, buf []float32) []float32 {
	if m.F32 != nil {
		return m.F32[n*m.K : (n+1)*m.K]
	}
	kernels.WidenBF16(buf[:m.K], m.BF16[n*m.K:(n+1)*m.K])
	return buf[:m.K]
}

// row returns row n as float32 (widening bf16 into buf, len >= K) and the
// float32 bits of its largest magnitude (>= infBits if it holds NaN/±Inf),
// computed in the same pass for bf16 input.
func (m Matrix) row(n int, buf []float32) ([]float32, uint32) {
	if m.F32 != nil {
		r := m.F32[n*m.K : (n+1)*m.K]
		return r, absmaxBits(r)
	}
	src := m.BF16[n*m.K : (n+1)*m.K]
	buf = buf[:len(src)]
	a, done := kernels.WidenAbsMaxBF16(buf, src)
	for i := done; i < len(src); i++ {
		buf[i] = math.Float32frombits(uint32(src[i]) << 16)
		a = max(a, src[i]&0x7fff)
	}
	return buf, uint32(a) << 16
}

// checkFinite reports the first NaN or ±Inf of row n, given the row's
// absmax bits.
func checkFinite(row []float32, n int, amaxBits uint32) error {
	if amaxBits < infBits {
		return nil
	}
	for k, x := range row {
		if absBits(x) >= infBits {
			return fmt.Errorf("quant: weight [%d, %d] is %v; cannot quantize non-finite values", n, k, x)
		}
	}
	return nil
}

// Int8Result is a per-channel int8 quantization of W[N, K].
type Int8Result struct {
	N, K   int
	Codes  []int8    // [N*K] row-major, the int8 weight tensor
	Scales []float32 // [N], rounded to the scale dtype (weight_scale [N, 1])
	Stats  ErrStats  // error of the dequantized matrix against W
}

// Int4Result is a group-wise 4-bit quantization of W[N, K].
type Int4Result struct {
	N, K, Group int
	Codes       []uint8   // [N*K] row-major, one code 0..15 per byte
	Scales      []float32 // [N, K/Group] row-major, rounded to the scale dtype
	Zeros       []float32 // [N, K/Group] (Asym4 only; nil for Sym4)
	Stats       ErrStats  // error of the dequantized matrix against W
}

// Sym4 returns the parameters of group g of row n.
func (r *Int4Result) Sym4(n, g int) Sym4 { return Sym4{Scale: r.Scales[n*(r.K/r.Group)+g]} }

// Asym4 returns the parameters of group g of row n.
func (r *Int4Result) Asym4(n, g int) Asym4 {
	i := n*(r.K/r.Group) + g
	return Asym4{Scale: r.Scales[i], Zero: r.Zeros[i]}
}

// Dequantize writes the dequantized matrix [N*K] into dst.
func (r *Int8Result) Dequantize(dst []float32) {
	for n := 0; n < r.N; n++ {
		Int8{Scale: r.Scales[n]}.Dequantize(dst[n*r.K:(n+1)*r.K], r.Codes[n*r.K:(n+1)*r.K])
	}
}

// Dequantize writes the dequantized matrix [N*K] into dst (Asym4 grid when
// Zeros is set, Sym4 otherwise).
func (r *Int4Result) Dequantize(dst []float32) {
	gpr := r.K / r.Group
	for n := 0; n < r.N; n++ {
		for g := 0; g < gpr; g++ {
			o := n*r.K + g*r.Group
			if r.Zeros != nil {
				r.Asym4(n, g).Dequantize(dst[o:o+r.Group], r.Codes[o:o+r.Group])
			} else {
				r.Sym4(n, g).Dequantize(dst[o:o+r.Group], r.Codes[o:o+r.Group])
			}
		}
	}
}

// QuantizeInt8 quantizes every row of m with compressed-tensors'
// symmetric per-channel int8 rule (Int8Absmax, Int8.Code) and scales rounded
// to dt, the dtype of the original weight. dst's slices are reused when
// large enough. Rows are spread over GOMAXPROCS goroutines; the result does
// not depend on their number.
func QuantizeInt8(dst *Int8Result, m Matrix, dt ScaleDType) error {
	if err := m.check(); err != nil {
		return err
	}
	if err := dt.valid(); err != nil {
		return err
	}
	dst.N, dst.K = m.N, m.K
	dst.Codes = grow(dst.Codes, m.N*m.K)
	dst.Scales = grow(dst.Scales, m.N)
	if m.BF16 != nil { // one pass for the maximum, one fused quantize pass
		st, err := forRowChunks(m.N, m.K, func() func(n int) (ErrStats, error) {
			return func(n int) (ErrStats, error) {
				row := m.BF16[n*m.K : (n+1)*m.K]
				a := absmaxBF16(row)
				if a >= 0x7f80 {
					return ErrStats{}, nonFiniteBF16(row, n)
				}
				p := int8FromAmax(bf16ToF32(a), dt)
				dst.Scales[n] = p.Scale
				return int8RowBF16(dst.Codes[n*m.K:(n+1)*m.K], row, p.Scale), nil
			}
		})
		dst.Stats = st
		return err
	}
	st, err := forRows(m, func(n int, row []float32, amaxBits uint32) (ErrStats, error) {
		if err := checkFinite(row, n, amaxBits); err != nil {
			return ErrStats{}, err
		}
		p := int8FromAmax(math.Float32frombits(amaxBits), dt)
		dst.Scales[n] = p.Scale
		return p.Quantize(dst.Codes[n*m.K:(n+1)*m.K], row), nil
	})
	dst.Stats = st
	return err
}

// QuantizeSym4 quantizes m on the symmetric 4-bit grid in groups of group
// consecutive k, scales rounded to dt: Sym4Search when search is set,
// Sym4Absmax otherwise.
func QuantizeSym4(dst *Int4Result, m Matrix, group int, dt ScaleDType, search bool) error {
	choose := Sym4Absmax
	if search {
		choose = Sym4Search
	}
	return quantizeGroups(dst, m, group, dt, false, func(i int, w []float32, codes []uint8) ErrStats {
		p := choose(w, dt)
		dst.Scales[i] = p.Scale
		return p.Quantize(codes, w)
	})
}

// QuantizeAsym4 quantizes m on tinygemm's asymmetric 4-bit grid in groups
// of group consecutive k, scale and zero rounded to dt: Asym4Search when
// search is set, Asym4MinMax otherwise.
func QuantizeAsym4(dst *Int4Result, m Matrix, group int, dt ScaleDType, search bool) error {
	if search {
		return quantizeZeros(dst, m, group, dt, Asym4Search)
	}
	return quantizeZeros(dst, m, group, dt, Asym4MinMax)
}

// QuantizeUInt4 quantizes m on the integer-zero asymmetric 4-bit grid
// (compressed-tensors' pack-quantized, symmetric false) in groups of group
// consecutive k, the scale rounded to dt: UInt4Search when search is set,
// UInt4MinMax otherwise. Zeros hold (8 - z) * scale (UInt4Zero gives z).
func QuantizeUInt4(dst *Int4Result, m Matrix, group int, dt ScaleDType, search bool) error {
	if search {
		return quantizeZeros(dst, m, group, dt, UInt4Search)
	}
	return quantizeZeros(dst, m, group, dt, UInt4MinMax)
}

// quantizeZeros quantizes every group with the Asym4 parameters choose
// gives it (the float-zero and integer-zero grids).
func quantizeZeros(dst *Int4Result, m Matrix, group int, dt ScaleDType, choose func([]float32, ScaleDType) Asym4) error {
	return quantizeGroups(dst, m, group, dt, true, func(i int, w []float32, codes []uint8) ErrStats {
		p := choose(w, dt)
		dst.Scales[i], dst.Zeros[i] = p.Scale, p.Zero
		return p.Quantize(codes, w)
	})
}

// quantizeGroups runs quantGroup over every group of every row (rows in
// parallel); i is the group's index in the [N, K/group] parameter arrays.
func quantizeGroups(dst *Int4Result, m Matrix, group int, dt ScaleDType, zeros bool, quantGroup func(i int, w []float32, codes []uint8) ErrStats) error {
	if err := prepInt4(dst, m, group, dt, zeros); err != nil {
		return err
	}
	gpr := m.K / group
	st, err := forRows(m, func(n int, row []float32, amaxBits uint32) (ErrStats, error) {
		if err := checkFinite(row, n, amaxBits); err != nil {
			return ErrStats{}, err
		}
		var rs ErrStats
		for g := 0; g < gpr; g++ {
			rs.Merge(quantGroup(n*gpr+g, row[g*group:(g+1)*group], dst.Codes[n*m.K+g*group:]))
		}
		return rs, nil
	})
	dst.Stats = st
	return err
}

func prepInt4(dst *Int4Result, m Matrix, group int, dt ScaleDType, zeros bool) error {
	if err := m.check(); err != nil {
		return err
	}
	if err := dt.valid(); err != nil {
		return err
	}
	if group <= 0 || m.K%group != 0 {
		return fmt.Errorf("quant: group size %d does not divide K=%d", group, m.K)
	}
	dst.N, dst.K, dst.Group = m.N, m.K, group
	ng := m.N * (m.K / group)
	dst.Codes = grow(dst.Codes, m.N*m.K)
	dst.Scales = grow(dst.Scales, ng)
	if zeros {
		dst.Zeros = grow(dst.Zeros, ng)
	} else {
		dst.Zeros = nil
	}
	return nil
}

func grow[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}

// chunkValues is the number of weights a goroutine takes at a time.
const chunkValues = 1 << 16

// forRows calls fn for every row of m, spreading fixed chunks of rows over
// GOMAXPROCS goroutines. Statistics are merged chunk by chunk in row order
// and the error of the lowest failing row is returned, so the outcome is the
// same for any number of goroutines.
func forRows(m Matrix, fn func(n int, row []float32, amaxBits uint32) (ErrStats, error)) (ErrStats, error) {
	return forRowChunks(m.N, m.K, func() func(n int) (ErrStats, error) {
		var buf []float32
		if m.BF16 != nil {
			buf = make([]float32, m.K)
		}
		return func(n int) (ErrStats, error) {
			row, amax := m.row(n, buf)
			return fn(n, row, amax)
		}
	})
}

// forRowChunks runs the row function of each goroutine (worker() is called
// once per goroutine, for its buffers) over chunks of rows of an [n, k]
// matrix, as forRows describes.
func forRowChunks(rows, k int, worker func() func(n int) (ErrStats, error)) (ErrStats, error) {
	rowsPer := max(1, chunkValues/k)
	chunks := (rows + rowsPer - 1) / rowsPer
	stats := make([]ErrStats, chunks)
	errs := make([]error, chunks)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), chunks) {
		wg.Go(func() {
			fn := worker()
			for {
				c := int(next.Add(1) - 1)
				if c >= chunks {
					return
				}
				for n := c * rowsPer; n < min(rows, (c+1)*rowsPer); n++ {
					st, err := fn(n)
					if err != nil {
						errs[c] = err
						break
					}
					stats[c].Merge(st)
				}
			}
		})
	}
	wg.Wait()
	var total ErrStats
	for c := range stats {
		if errs[c] != nil {
			return total, errs[c]
		}
		total.Merge(stats[c])
	}
	return total, nil
}

// QuantizeInt8Scaled is QuantizeInt8 with the row scales already chosen:
// scales must be Int8Scales of the same matrix and dtype (which refuses
// non-finite values), and the result is then QuantizeInt8's bit for bit.
// A bf16 matrix takes one pass over its bits, widening fused into the
// quantizer (SIMD where the CPU allows).
func QuantizeInt8Scaled(dst *Int8Result, m Matrix, scales []float32) error {
	if err := m.check(); err != nil {
		return err
	}
	if len(scales) != m.N {
		return fmt.Errorf("quant: %d scales for a matrix of %d rows", len(scales), m.N)
	}
	dst.N, dst.K = m.N, m.K
	dst.Codes = grow(dst.Codes, m.N*m.K)
	dst.Scales = grow(dst.Scales, m.N)
	copy(dst.Scales, scales)
	st, err := forRowChunks(m.N, m.K, func() func(n int) (ErrStats, error) {
		return func(n int) (ErrStats, error) {
			codes := dst.Codes[n*m.K : (n+1)*m.K]
			if m.BF16 != nil {
				return int8RowBF16(codes, m.BF16[n*m.K:(n+1)*m.K], scales[n]), nil
			}
			return int8Kernel(codes, m.F32[n*m.K:(n+1)*m.K], scales[n]), nil
		}
	})
	dst.Stats = st
	return err
}

// Int8Scales returns only the per-row scales QuantizeInt8 would choose (a
// parallel pass over row maxima, on the bf16 bits directly when the matrix
// is bf16), for writers that store the scales apart from the codes.
func Int8Scales(m Matrix, dt ScaleDType) ([]float32, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	if err := dt.valid(); err != nil {
		return nil, err
	}
	scales := make([]float32, m.N)
	if m.BF16 == nil {
		_, err := forRows(m, func(n int, row []float32, amax uint32) (ErrStats, error) {
			if err := checkFinite(row, n, amax); err != nil {
				return ErrStats{}, err
			}
			scales[n] = int8FromAmax(math.Float32frombits(amax), dt).Scale
			return ErrStats{}, nil
		})
		return scales, err
	}
	errs := make([]error, m.N)
	parallelRows(m.N, func(n int) {
		row := m.BF16[n*m.K : (n+1)*m.K]
		a := absmaxBF16(row)
		if a >= 0x7f80 {
			errs[n] = nonFiniteBF16(row, n)
			return
		}
		scales[n] = int8FromAmax(bf16ToF32(a), dt).Scale
	})
	for _, err := range errs {
		if err != nil {
			return scales, err
		}
	}
	return scales, nil
}

// absmaxBF16 is the largest magnitude's bits of a bf16 row (>= 0x7f80
// when it holds NaN or ±Inf).
func absmaxBF16(row []uint16) uint16 {
	a, done := kernels.AbsMaxBF16(row)
	for _, b := range row[done:] {
		a = max(a, b&0x7fff)
	}
	return a
}

// nonFiniteBF16 names the first NaN or ±Inf of bf16 row n.
func nonFiniteBF16(row []uint16, n int) error {
	for k, b := range row {
		if b&0x7fff >= 0x7f80 {
			return fmt.Errorf("quant: weight [%d, %d] is %v; cannot quantize non-finite values", n, k, bf16ToF32(b))
		}
	}
	return nil
}

// parallelRows calls fn for every row in [0, n) on GOMAXPROCS goroutines.
func parallelRows(n int, fn func(row int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Go(func() {
			for r := int(next.Add(1) - 1); r < n; r = int(next.Add(1) - 1) {
				fn(r)
			}
		})
	}
	wg.Wait()
}
