package kernels

import (
	"fmt"
	"math"
)

// Dot returns sum a[i]*b[i] over len(a) elements (b must be at least as long).
func Dot(a, b []float32) float32 {
	checkLen("Dot", "b", b, len(a))
	return dot(a, b[:len(a)])
}

// dot is the active dot kernel (assembly on amd64 when available).
var dot = dotGo

func dotGo(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= len(a); i += 8 {
		av := a[i : i+8 : i+8]
		bv := b[i : i+8 : i+8]
		s0 += av[0] * bv[0]
		s1 += av[1] * bv[1]
		s2 += av[2] * bv[2]
		s3 += av[3] * bv[3]
		s4 += av[4] * bv[4]
		s5 += av[5] * bv[5]
		s6 += av[6] * bv[6]
		s7 += av[7] * bv[7]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

// Axpy computes y[i] += alpha * x[i] over len(x) elements.
func Axpy(alpha float32, x, y []float32) {
	checkLen("Axpy", "y", y, len(x))
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}

// RMSNorm writes out = x / sqrt(mean(x^2) + eps) * w for each row of x,
// where a row is len(w) long and len(x) is a multiple of it. The mean is
// accumulated in float64. out may alias x.
func RMSNorm(out, x, w []float32, eps float32) {
	d := len(w)
	if d == 0 || len(x)%d != 0 {
		panic(fmt.Sprintf("kernels: RMSNorm: len(x) = %d is not a multiple of len(w) = %d", len(x), d))
	}
	checkLen("RMSNorm", "out", out, len(x))
	for r := 0; r < len(x); r += d {
		row := x[r : r+d]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		inv := float32(1 / math.Sqrt(ss/float64(d)+float64(eps)))
		o := out[r : r+d]
		for i, v := range row {
			o[i] = v * inv * w[i]
		}
	}
}

// Softmax replaces x by exp(x - max) / sum(exp(x - max)) in place. The sum
// is accumulated in float64. An empty slice is left alone.
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	mx := x[0]
	for _, v := range x[1:] {
		mx = max(mx, v)
	}
	var sum float64
	for i, v := range x {
		e := math.Exp(float64(v - mx))
		x[i] = float32(e)
		sum += e
	}
	inv := float32(1 / sum)
	for i := range x {
		x[i] *= inv
	}
}

// Sigmoid replaces x by 1/(1+exp(-x)) in place, evaluated in float64.
func Sigmoid(x []float32) {
	for i, v := range x {
		x[i] = float32(1 / (1 + math.Exp(-float64(v))))
	}
}

// Mul computes dst[i] *= x[i] over len(dst) elements.
func Mul(dst, x []float32) {
	checkLen("Mul", "x", x, len(dst))
	x = x[:len(dst)]
	for i := range dst {
		dst[i] *= x[i]
	}
}
