package quant

import "sparkconv/kernels"

// Quantize-and-measure kernels: one pass over a group (or row) that writes
// codes and accumulates blockStats. They are written out per grid so the
// code function and LUT lookups inline. Two lanes per step (four would
// spill Go's 16 vector registers), 16 values per float32 block.

// int8Code is Int8.Code without the division: t = w * (1/s) differs from
// the correctly rounded w/s by at most a couple of float32 ulps, so it
// rounds to the same integer unless t lies within 2^-14 of a half-integer
// (ulp(t) <= 2^-16 for |t| < 256); then the exact quotient decides. Out of
// range t also takes the exact path. Identical to rint(w/s) for every input.
func int8Code(w, s, inv float32) int8 {
	t := float32(w * inv)
	r := rint(t)
	if f := t - float32(r); f > 0.5-0x1p-14 || f < -0.5+0x1p-14 {
		r = rint(w / s)
	}
	return int8(min(max(r, -128), 127))
}

func int8Kernel(dst []int8, w []float32, s float32) ErrStats {
	var b blockStats
	int8Blocks(&b, dst, w, s)
	return b.stats(len(w))
}

// int8Blocks quantizes w into dst, adding to b.
func int8Blocks(b *blockStats, dst []int8, w []float32, s float32) {
	dst = dst[:len(w)]
	inv := 1 / s
	var m0, m1 uint32
	i := 0
	for ; i+16 <= len(w); i += 16 {
		var s0, s1, e0, e1 float32
		for j := i; j < i+16; j += 2 {
			c := (*[2]float32)(w[j : j+2])
			o := (*[2]int8)(dst[j : j+2])
			q0, q1 := int8Code(c[0], s, inv), int8Code(c[1], s, inv)
			o[0], o[1] = q0, q1
			d0 := c[0] - float32(float32(q0)*s)
			d1 := c[1] - float32(float32(q1)*s)
			s0 += float32(c[0] * c[0])
			s1 += float32(c[1] * c[1])
			e0 += float32(d0 * d0)
			e1 += float32(d1 * d1)
			m0 = max(m0, absBits(d0))
			m1 = max(m1, absBits(d1))
		}
		b.flush(s0, s1, e0, e1)
	}
	b.maxBits = max(b.maxBits, m0, m1)
	for ; i < len(w); i++ {
		q := int8Code(w[i], s, inv)
		dst[i] = q
		b.one(w[i], float32(float32(q)*s))
	}
}

// int8RowBF16 is int8Kernel of the widened bf16 row src, bit for bit: the
// SIMD kernel (when one runs) takes the whole 64-value blocks, the portable
// code the rest.
func int8RowBF16(dst []int8, src []uint16, s float32) ErrStats {
	var b blockStats
	var sums [2]float64
	maxBits, done := kernels.Int8BF16(dst, src, s, &sums)
	b.sumSq, b.sumErr, b.maxBits = sums[0], sums[1], maxBits
	var buf [256]float32
	for done < len(src) {
		n := min(len(buf), len(src)-done)
		for i, v := range src[done : done+n] {
			buf[i] = bf16ToF32(v)
		}
		int8Blocks(&b, dst[done:done+n], buf[:n], s)
		done += n
	}
	return b.stats(len(src))
}

func sym4Kernel(dst []uint8, w []float32, s float32) ErrStats {
	dst = dst[:len(w)]
	inv := 1 / s
	var b blockStats
	var sums [2]float64
	maxBits, done := kernels.Quant4F32(dst, w, s, 0, inv, &sums)
	b.sumSq, b.sumErr, b.maxBits = sums[0], sums[1], maxBits
	sym4Blocks(&b, dst[done:], w[done:], s, inv)
	return b.stats(len(w))
}

// sym4Blocks is sym4Kernel's portable body, adding to b.
func sym4Blocks(b *blockStats, dst []uint8, w []float32, s, inv float32) {
	lut := symLUT(s)
	var m0, m1 uint32
	i := 0
	for ; i+16 <= len(w); i += 16 {
		var s0, s1, e0, e1 float32
		for j := i; j < i+16; j += 2 {
			c := (*[2]float32)(w[j : j+2])
			o := (*[2]uint8)(dst[j : j+2])
			q0, q1 := symCode(c[0], inv), symCode(c[1], inv)
			o[0], o[1] = q0, q1
			d0 := c[0] - lut[q0&15]
			d1 := c[1] - lut[q1&15]
			s0 += float32(c[0] * c[0])
			s1 += float32(c[1] * c[1])
			e0 += float32(d0 * d0)
			e1 += float32(d1 * d1)
			m0 = max(m0, absBits(d0))
			m1 = max(m1, absBits(d1))
		}
		b.flush(s0, s1, e0, e1)
	}
	b.maxBits = max(b.maxBits, m0, m1)
	for ; i < len(w); i++ {
		q := symCode(w[i], inv)
		dst[i] = q
		b.one(w[i], lut[q&15])
	}
}

func asym4Kernel(dst []uint8, w []float32, p Asym4) ErrStats {
	dst = dst[:len(w)]
	inv := 1 / p.Scale
	var b blockStats
	var sums [2]float64
	maxBits, done := kernels.Quant4F32(dst, w, p.Scale, p.Zero, inv, &sums)
	b.sumSq, b.sumErr, b.maxBits = sums[0], sums[1], maxBits
	asym4Blocks(&b, dst[done:], w[done:], p, inv)
	return b.stats(len(w))
}

// asym4Blocks is asym4Kernel's portable body, adding to b.
func asym4Blocks(b *blockStats, dst []uint8, w []float32, p Asym4, inv float32) {
	z := p.Zero
	lut := asymLUT(p)
	var m0, m1 uint32
	i := 0
	for ; i+16 <= len(w); i += 16 {
		var s0, s1, e0, e1 float32
		for j := i; j < i+16; j += 2 {
			c := (*[2]float32)(w[j : j+2])
			o := (*[2]uint8)(dst[j : j+2])
			q0, q1 := asymCode(c[0], z, inv), asymCode(c[1], z, inv)
			o[0], o[1] = q0, q1
			d0 := c[0] - lut[q0&15]
			d1 := c[1] - lut[q1&15]
			s0 += float32(c[0] * c[0])
			s1 += float32(c[1] * c[1])
			e0 += float32(d0 * d0)
			e1 += float32(d1 * d1)
			m0 = max(m0, absBits(d0))
			m1 = max(m1, absBits(d1))
		}
		b.flush(s0, s1, e0, e1)
	}
	b.maxBits = max(b.maxBits, m0, m1)
	for ; i < len(w); i++ {
		q := asymCode(w[i], z, inv)
		dst[i] = q
		b.one(w[i], lut[q&15])
	}
}
