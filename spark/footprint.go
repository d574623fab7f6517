package spark

import (
	"fmt"
	"math"
	"math/bits"
)

// Footprint is what `sparkconv inspect` reports: parameter counts, checkpoint
// bytes per weight format, KV-cache and RoPE-table memory. All bytes are
// computed from the config alone.
type Footprint struct {
	Params       ParamCounts      `json:"params"`
	Formats      []FormatBytes    `json:"formats"`
	KVCache      KVCacheBytes     `json:"kv_cache"`
	RoPETables   RoPETableBytes   `json:"rope_tables"`
	LayerTypeMap string           `json:"layer_type_map"`
	Layers       map[string][]int `json:"layers_by_type"`
}

// ParamCounts counts parameters by role.
type ParamCounts struct {
	Total          int64 `json:"total"`
	Embedding      int64 `json:"embedding"`
	Head           int64 `json:"head"` // 0 when tied
	PerLayer       int64 `json:"per_layer"`
	QuantLinears   int64 `json:"quantizable_linears"` // the 5 linears x layers
	Gate           int64 `json:"g_proj"`
	Norms          int64 `json:"norms"`
	QuantizedCount int   `json:"quantizable_linear_tensors"`
}

// FormatBytes is the checkpoint size of one output format.
type FormatBytes struct {
	Format string `json:"format"`
	Head   string `json:"head"` // "tied bf16", "bf16", or "quantized"
	Bytes  int64  `json:"bytes"`
}

// KVCacheBytes is K+V memory in bf16.
type KVCacheBytes struct {
	BytesPerTokenFlat int64 `json:"bytes_per_token_flat"`
	Context           int   `json:"context"`
	FlatBytes         int64 `json:"flat_bytes"`
	HybridBytes       int64 `json:"hybrid_bytes"`
	SlidingCap        int   `json:"sliding_slots_cap"`
}

// RoPETableBytes is cos+sin tables (half width, bf16) for both layer types.
type RoPETableBytes struct {
	BytesPerPosition   int64 `json:"bytes_per_position"`
	MaxPositions       int   `json:"max_position_embeddings"`
	BytesByMaxPosition int64 `json:"bytes_by_max_position_embeddings"`
	MaxModelLen        int   `json:"max_model_len"`
	BytesByModelLen    int64 `json:"bytes_by_max_model_len"`
}

// linearShapes returns [N, K] of the 5 quantizable linears of one layer.
func (c *Config) linearShapes() [][2]int64 {
	h, i := int64(c.HiddenSize), int64(c.IntermediateSize)
	return [][2]int64{{int64(c.QDim() + 2*c.KVDim()), h}, {h, int64(c.QDim())}, {i, h}, {i, h}, {h, i}}
}

// sizer does the footprint's int64 arithmetic and remembers an overflow.
type sizer struct{ overflow bool }

func (s *sizer) mul(xs ...int64) int64 {
	r := uint64(1)
	for _, x := range xs {
		hi, lo := bits.Mul64(r, uint64(max(x, 0)))
		if hi != 0 || lo > math.MaxInt64 {
			s.overflow = true
			return 0
		}
		r = lo
	}
	return int64(r)
}

func (s *sizer) add(xs ...int64) int64 {
	var r int64
	for _, x := range xs {
		if r > math.MaxInt64-x {
			s.overflow = true
			return 0
		}
		r += x
	}
	return r
}

// Footprint computes the footprint for a context of maxModelLen tokens. It fails,
// instead of printing a wrapped-around number, when a byte count would not
// fit in an int64.
func (c *Config) Footprint(maxModelLen int) (Footprint, error) {
	var p Footprint
	var s sizer
	h, v, L := int64(c.HiddenSize), int64(c.VocabSize), int64(c.NumLayers)
	var lin int64
	for _, sh := range c.linearShapes() {
		lin = s.add(lin, s.mul(sh[0], sh[1]))
	}
	p.Params.Embedding = s.mul(v, h)
	if !c.TieWordEmbeddings {
		p.Params.Head = p.Params.Embedding
	}
	p.Params.Gate = s.mul(int64(c.NumHeads), h, L)
	p.Params.Norms = s.add(s.mul(2, h, L), h)
	p.Params.QuantLinears = s.mul(lin, L)
	p.Params.PerLayer = s.add(lin, s.mul(int64(c.NumHeads), h), 2*h)
	p.Params.QuantizedCount = 5 * c.NumLayers
	p.Params.Total = s.add(p.Params.Embedding, p.Params.Head, p.Params.Gate, p.Params.Norms, p.Params.QuantLinears)

	p.Formats = c.formatBytes(&s, p.Params)
	p.KVCache = c.kvBytes(&s, maxModelLen)
	p.RoPETables = c.ropeBytes(&s, maxModelLen)
	if s.overflow {
		return Footprint{}, fmt.Errorf("the footprint's byte counts for %s at max_model_len %d do not fit in 64 bits", c.Summary(), maxModelLen)
	}
	p.Layers = map[string][]int{}
	var m []byte
	for i, t := range c.LayerTypes {
		p.Layers[string(t)] = append(p.Layers[string(t)], i)
		if t == Sliding {
			m = append(m, 's')
		} else {
			m = append(m, 'f')
		}
	}
	p.LayerTypeMap = string(m)
	return p, nil
}

// formatBytes sizes each format with group 128 for the 4-bit ones. bf16
// parts (embedding, norms, g_proj) are 2 bytes per value.
func (c *Config) formatBytes(s *sizer, pc ParamCounts) []FormatBytes {
	const g = 128
	v, h := int64(c.VocabSize), int64(c.HiddenSize)
	rest := s.mul(2, s.add(pc.Embedding, pc.Gate, pc.Norms)) // always bf16
	w8 := func(n, k int64) int64 { return s.add(s.mul(n, k), 2*n) }
	w4a16 := func(n, k int64) int64 { return s.add(s.mul(n, k)/2, s.mul(k/g, n, 2, 2)) }
	w4a8 := func(n, k int64) int64 {
		return s.add(s.mul(n, k)/2, s.mul(k/g, n, 2), s.mul(k/g, n/8, 4), s.mul(k, 4))
	}
	sum := func(f func(n, k int64) int64) int64 {
		var t int64
		for _, sh := range c.linearShapes() {
			t = s.add(t, f(sh[0], sh[1]))
		}
		return s.mul(t, int64(c.NumLayers))
	}
	headBF16 := int64(0)
	headLabel := "tied bf16"
	if !c.TieWordEmbeddings {
		headBF16, headLabel = s.mul(2, v, h), "bf16"
	}
	out := []FormatBytes{
		{"bf16", headLabel, s.add(rest, s.mul(2, pc.QuantLinears), headBF16)},
		{"w8a8", headLabel, s.add(rest, sum(w8), headBF16)},
	}
	for _, f := range []struct {
		name string
		fn   func(n, k int64) int64
	}{{"w4a16", w4a16}, {"w4a8", w4a8}} {
		body := s.add(rest, sum(f.fn))
		out = append(out,
			FormatBytes{f.name, headLabel, s.add(body, headBF16)},
			FormatBytes{f.name, "quantized", s.add(body, f.fn(v, h))})
	}
	return out
}

func (c *Config) kvBytes(s *sizer, ctx int) KVCacheBytes {
	perLayer := s.mul(2, int64(c.NumKVHeads), int64(c.HeadDim), 2) // K and V, bf16
	p := KVCacheBytes{Context: ctx, SlidingCap: c.SlidingWindow - 1}
	p.BytesPerTokenFlat = s.mul(perLayer, int64(c.NumLayers))
	p.FlatBytes = s.mul(p.BytesPerTokenFlat, int64(ctx))
	for i := range c.NumLayers {
		tokens := ctx
		if c.IsSliding(i) {
			tokens = min(ctx, c.SlidingWindow-1)
		}
		p.HybridBytes = s.add(p.HybridBytes, s.mul(perLayer, int64(tokens)))
	}
	return p
}

func (c *Config) ropeBytes(s *sizer, maxModelLen int) RoPETableBytes {
	var half int64
	seen := map[LayerType]bool{}
	for i, t := range c.LayerTypes {
		if !seen[t] {
			seen[t] = true
			half += int64(c.RotaryDims(i) / 2)
		}
	}
	per := s.mul(half, 2, 2) // cos and sin, bf16
	return RoPETableBytes{
		BytesPerPosition: per, MaxPositions: c.MaxPositionEmbeddings,
		BytesByMaxPosition: s.mul(per, int64(c.MaxPositionEmbeddings)),
		MaxModelLen:        maxModelLen, BytesByModelLen: s.mul(per, int64(maxModelLen)),
	}
}
