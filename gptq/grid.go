package gptq

import (
	"fmt"

	"sparkconv/convert"
	"sparkconv/quant"
)

// Grid is what the solve quantizes to: the format's convert.GridSpec (for
// per-channel int8 the group is K itself), with the solve's parameter rules
// as methods.
type Grid convert.GridSpec

// param is one group's parameters (zero only on the asymmetric grid).
type param struct{ scale, zero float32 }

// String names the grid for messages.
func (g Grid) String() string {
	if g.Kind == convert.GridInt8 {
		return g.Kind.String()
	}
	return fmt.Sprintf("%s g%d", g.Kind, g.Group)
}

// group is the group size on a K-wide matrix.
func (g Grid) group(k int) int {
	if g.Kind == convert.GridInt8 {
		return k
	}
	return g.Group
}

// fit chooses a group's parameters from its weights, with package quant's
// rules (the same as round to nearest uses).
func (g Grid) fit(seg []float32) param { return g.fitWeighted(seg, nil) }

// fitWeighted is fit with the search weighted by the input channels'
// importances imp (len(seg) of them; nil: unweighted). Only the searched
// 4-bit grids weigh them: the plain rules take the range as it is.
func (g Grid) fitWeighted(seg, imp []float32) param {
	if imp != nil && g.Search {
		switch g.Kind {
		case convert.GridSym4:
			return param{scale: quant.Sym4SearchWeighted(seg, imp, g.DType).Scale}
		case convert.GridAsym4:
			p := quant.Asym4SearchWeighted(seg, imp, g.DType)
			return param{scale: p.Scale, zero: p.Zero}
		case convert.GridUInt4:
			p := quant.UInt4SearchWeighted(seg, imp, g.DType)
			return param{scale: p.Scale, zero: p.Zero}
		}
	}
	switch g.Kind {
	case convert.GridSym4:
		if g.Search {
			return param{scale: quant.Sym4Search(seg, g.DType).Scale}
		}
		return param{scale: quant.Sym4Absmax(seg, g.DType).Scale}
	case convert.GridAsym4:
		var p quant.Asym4
		if g.Search {
			p = quant.Asym4Search(seg, g.DType)
		} else {
			p = quant.Asym4MinMax(seg, g.DType)
		}
		return param{scale: p.Scale, zero: p.Zero}
	case convert.GridUInt4:
		p := quant.UInt4MinMax(seg, g.DType)
		if g.Search {
			p = quant.UInt4Search(seg, g.DType)
		}
		return param{scale: p.Scale, zero: p.Zero}
	}
	return param{scale: quant.Int8Absmax(seg, g.DType).Scale}
}

// code is w's nearest code on p's grid and its dequantized value. Int8
// codes are stored as their two's-complement byte.
func (g Grid) code(p param, w float32) (uint8, float32) {
	switch g.Kind {
	case convert.GridSym4:
		s := quant.Sym4{Scale: p.scale}
		q := s.Code(w)
		return q, s.Value(q)
	case convert.GridAsym4, convert.GridUInt4:
		a := quant.Asym4{Scale: p.scale, Zero: p.zero}
		q := a.Code(w)
		return q, a.Value(q)
	}
	s := quant.Int8{Scale: p.scale}
	q := s.Code(w)
	return uint8(q), s.Value(q)
}

// value is code q's value under p.
func (g Grid) value(p param, q uint8) float32 {
	switch g.Kind {
	case convert.GridSym4:
		return quant.Sym4{Scale: p.scale}.Value(q)
	case convert.GridAsym4, convert.GridUInt4:
		return quant.Asym4{Scale: p.scale, Zero: p.zero}.Value(q)
	}
	return quant.Int8{Scale: p.scale}.Value(int8(q))
}

// values dequantizes one group's stored codes into dst[:len(codes)].
func (g Grid) values(p param, codes []uint8, dst []float32) {
	dst = dst[:len(codes)]
	switch g.Kind {
	case convert.GridSym4:
		s := quant.Sym4{Scale: p.scale}
		for j, q := range codes {
			dst[j] = s.Value(q)
		}
	case convert.GridAsym4, convert.GridUInt4:
		a := quant.Asym4{Scale: p.scale, Zero: p.zero}
		for j, q := range codes {
			dst[j] = a.Value(q)
		}
	default:
		s := quant.Int8{Scale: p.scale}
		for j, q := range codes {
			dst[j] = s.Value(int8(q))
		}
	}
}
