package onnxgraph

import "math"

// The op patterns below are written exactly as QNN's converter and ORT's
// QNN EP match them (docs/qnn.md#what-htps-converter-accepts); changing their shape breaks fusion.

// The pattern helpers name their result out ("" invents a name) and their
// interior values after it (out/Pow_0, ...), so a pattern's values share
// one stable scope.

// RMSNorm emits Pow(x, 2) -> ReduceMean(last axis) -> Add(eps) -> Sqrt ->
// Div(x, .) -> Mul(weight), the pattern QNN fuses into its RmsNorm op.
func (b *Builder) RMSNorm(out, x, weight string, eps float64) string {
	defer b.scope(out)()
	sq := b.Op("Pow", []string{x, b.Scalar(2)})
	mean := b.Op("ReduceMean", []string{sq}, AttrInts("axes", -1), AttrInt("keepdims", 1))
	rms := b.Op("Sqrt", []string{b.Op("Add", []string{mean, b.Scalar(eps)})})
	return b.opOut(out, "Mul", []string{b.Op("Div", []string{x, rms}), weight})
}

// GELUErf emits exact GELU as Div(x, sqrt 2) -> Erf -> Add(1) -> Mul(x) ->
// Mul(0.5), the pattern QNN fuses into Gelu (a lone Erf is not supported).
func (b *Builder) GELUErf(out, x string) string {
	defer b.scope(out)()
	e := b.Op("Erf", []string{b.Op("Div", []string{x, b.Scalar(math.Sqrt2)})})
	p := b.Op("Add", []string{e, b.Scalar(1)})
	return b.opOut(out, "Mul", []string{b.Op("Mul", []string{x, p}), b.Scalar(0.5)})
}

// GELUTanh emits 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
func (b *Builder) GELUTanh(out, x string) string {
	defer b.scope(out)()
	x3 := b.Op("Mul", []string{b.Op("Mul", []string{x, x}), x})
	inner := b.Op("Add", []string{x, b.Op("Mul", []string{x3, b.Scalar(0.044715)})})
	t := b.Op("Tanh", []string{b.Op("Mul", []string{inner, b.Scalar(math.Sqrt(2 / math.Pi))})})
	p := b.Op("Add", []string{t, b.Scalar(1)})
	return b.opOut(out, "Mul", []string{b.Op("Mul", []string{x, p}), b.Scalar(0.5)})
}

// Reshape reshapes x to a static shape (allowzero left at its default 0).
func (b *Builder) Reshape(x string, shape ...int64) string {
	return b.Op("Reshape", []string{x, b.Int64s(shape...)})
}

// ReshapeTo is Reshape whose output is named out ("" invents a name).
func (b *Builder) ReshapeTo(out, x string, shape ...int64) string {
	if out == "" {
		return b.Reshape(x, shape...)
	}
	return b.OpTo(out, "Reshape", []string{x, b.Int64s(shape...)})
}

// RoPE rotates the first 2*half dims of the last axis of x (width d) with
// NeoX rotate_half: concat(x1*cos - x2*sin, x2*cos + x1*sin, x[2*half:]).
// cos and sin are [1,1,half] and broadcast over the leading axes.
func (b *Builder) RoPE(out, x, cos, sin string, half, d int64) string {
	defer b.scope(out)()
	sizes := []int64{half, half}
	if d > 2*half {
		sizes = append(sizes, d-2*half)
	}
	parts := b.OpN("Split", len(sizes), []string{x, b.Int64s(sizes...)}, AttrInt("axis", -1))
	x1, x2 := parts[0], parts[1]
	r1 := b.Op("Sub", []string{b.Op("Mul", []string{x1, cos}), b.Op("Mul", []string{x2, sin})})
	r2 := b.Op("Add", []string{b.Op("Mul", []string{x2, cos}), b.Op("Mul", []string{x1, sin})})
	return b.opOut(out, "Concat", append([]string{r1, r2}, parts[2:]...), AttrInt("axis", -1))
}
