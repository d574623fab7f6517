package qnnbundle

import (
	"fmt"
	"sort"

	"sparkconv/forward"
	"sparkconv/onnxgraph"
)

// Sample is one graph's inputs at one position, exactly as a runtime feeds
// them (onnxgraph's host loop: ring or roll caches, the mask with
// mask_value on empty slots, rope_cos/rope_sin), and, for held-out samples,
// the float32 reference's outputs on those inputs.
type Sample struct {
	Pos int
	// Seq is the held-out sequence (sample) the position belongs to: each
	// held-out sample is traced as its own sequence from position 0.
	Seq   int
	Feeds map[string]onnxgraph.Tensor
	// Want holds the reference forward's outputs: "hidden_out" (embed,
	// layer, block) or "logits" (head).
	Want map[string][]float32
}

// SamplePositions spreads n calibration and held positions evenly over
// [0, last] (both ends included, so early positions with empty slots, the
// positions after the sliding window wraps and the end of the context are
// all seen) and deals them alternately to calibration and held-out.
func SamplePositions(n, held, last int) (calib, hold []int) {
	k := n + held
	if k <= 0 || last < 0 {
		return nil, nil
	}
	seen := map[int]bool{}
	var all []int
	for i := range k {
		p := spread(i, k, last)
		if !seen[p] {
			seen[p] = true
			all = append(all, p)
		}
	}
	for i, p := range all {
		if (i%2 == 0 && len(calib) < n) || len(hold) >= held {
			calib = append(calib, p)
		} else {
			hold = append(hold, p)
		}
	}
	return calib, hold
}

// spread is the i-th of n positions spread evenly over [0, last], both
// ends included (rounded to nearest; 0 when n is 1).
func spread(i, n, last int) int {
	if n <= 1 {
		return 0
	}
	return (i*last + (n-1)/2) / (n - 1)
}

// Trace is the reference forward's record of one token sequence over a
// part of the model (Stream.Traces: one graph's layers; NewTrace: all of
// them): per position the residual entering each traced layer and leaving
// the last, each traced layer's key (after RoPE) and value, and the
// logits at the held positions when the trace reaches the head. Its
// per-position values are the decode step's (forward's tests hold decode
// to prefill at 132 dB); Samples replays each layer's cache entry by entry
// in its graph's layout and size, exactly the runtime's host loop.
type Trace struct {
	ids       []int
	hidden    [][]float32 // [L+1][T*H], nil outside the trace
	key, val  [][]float32 // [L][T*KV*D], nil outside the trace
	logits    map[int][]float32
	h, kvd    int
	kvHeads   int
	headDim   int
	context   int
	maskValue float32
	layers    int
}

// NewTrace runs ids through the whole reference (positions
// 0..len(ids)-1) and keeps every layer and the logits of the held
// positions.
func NewTrace(ref *forward.Model, man *onnxgraph.Manifest, ids []int, held []int) (*Trace, error) {
	s, err := NewStream(ref, man, [][]int{ids}, [][]int{held}, func(int) string { return "the trace" })
	if err != nil {
		return nil, err
	}
	ts, err := s.trace(0, ref.Cfg.NumLayers-1, true)
	if err != nil {
		return nil, err
	}
	return ts[0], nil
}

func (t *Trace) hiddenAt(i, p int) []float32 {
	return append([]float32(nil), t.hidden[i][p*t.h:(p+1)*t.h]...)
}

// Samples calls fn with graph e's inputs at each of positions (ascending),
// and with the reference's outputs when want is set.
// For a prefill graph positions are chunk starts (prefillSamples).
func (t *Trace) Samples(e onnxgraph.GraphEntry, positions []int, want bool, fn func(Sample) error) error {
	if e.Decode != "" {
		return t.prefillSamples(e, positions, want, fn)
	}
	for k := 1; k < len(positions); k++ {
		if positions[k] <= positions[k-1] {
			return fmt.Errorf("positions %v not strictly ascending", positions)
		}
	}
	if len(positions) == 0 {
		return nil
	}
	if last := positions[len(positions)-1]; last >= len(t.ids) {
		return fmt.Errorf("position %d past the %d traced tokens", last, len(t.ids))
	}
	H := int64(t.h)
	infos := e.LayerInfos()
	caches := make([]*forward.LayerCache, len(infos))
	for k, li := range infos {
		if li.Layer >= t.layers {
			return fmt.Errorf("%s: layer %d, the model has %d", e.File, li.Layer, t.layers)
		}
		lay := forward.Ring
		if li.Layout == onnxgraph.LayoutRoll {
			lay = forward.Roll
		}
		if t.key[li.Layer] == nil {
			return fmt.Errorf("%s: layer %d is outside the trace", e.File, li.Layer)
		}
		caches[k] = forward.NewLayerCache(lay, t.kvHeads, t.headDim, li.CacheSlots)
	}
	next := 0
	for p := 0; next < len(positions); p++ {
		if p == positions[next] {
			next++
			s := Sample{Pos: p, Feeds: map[string]onnxgraph.Tensor{}}
			if want {
				s.Want = map[string][]float32{}
			}
			switch e.Kind {
			case onnxgraph.KindEmbed:
				s.Feeds["input_ids"] = onnxgraph.I64Tensor([]int64{1, 1}, []int64{int64(t.ids[p])})
				if want {
					s.Want["hidden_out"] = t.hiddenAt(0, p)
				}
			case onnxgraph.KindHead:
				s.Feeds["hidden_in"] = onnxgraph.F32Tensor([]int64{1, 1, H}, t.hiddenAt(t.layers, p))
				if want {
					l, ok := t.logits[p]
					if !ok {
						return fmt.Errorf("position %d: no reference logits traced", p)
					}
					s.Want["logits"] = l
				}
			default:
				s.Feeds["hidden_in"] = onnxgraph.F32Tensor([]int64{1, 1, H}, t.hiddenAt(infos[0].Layer, p))
				for k, li := range infos {
					for name, v := range cacheFeeds(caches[k], li, p, t.maskValue, onnxgraph.LayerSuffix(e.Kind, li.Layer)) {
						s.Feeds[name] = v
					}
				}
				if want {
					s.Want["hidden_out"] = t.hiddenAt(infos[len(infos)-1].Layer+1, p)
				}
			}
			if err := fn(s); err != nil {
				return err
			}
		}
		for k, li := range infos {
			kv := t.kvd
			caches[k].Update(p, t.key[li.Layer][p*kv:(p+1)*kv], t.val[li.Layer][p*kv:(p+1)*kv])
		}
	}
	return nil
}

// Collect returns the samples at positions.
func (t *Trace) Collect(e onnxgraph.GraphEntry, positions []int, want bool) ([]Sample, error) {
	var out []Sample
	err := t.Samples(e, positions, want, func(s Sample) error { out = append(out, s); return nil })
	return out, err
}

// ObservePositions spreads n positions evenly over [0, last] leaving out
// the held ones, and adds the calibration positions: the positions whose
// activations set the ranges.
func ObservePositions(n, last int, calib, held []int) []int {
	skip := map[int]bool{}
	for _, p := range held {
		skip[p] = true
	}
	set := map[int]bool{}
	for _, p := range calib {
		set[p] = true
	}
	for i := range n {
		if p := spread(i, n, last); !skip[p] {
			set[p] = true
		}
	}
	out := make([]int, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

// cacheFeeds is the layer's feeds (all but hidden_in) from a forward cache,
// copied (the cache moves on).
func cacheFeeds(lc *forward.LayerCache, li onnxgraph.LayerInfo, p int, mv float32, sfx string) map[string]onnxgraph.Tensor {
	st := &onnxgraph.CacheState{Info: li, KV: lc.KVHeads, D: lc.HeadDim,
		Key: append([]float32(nil), lc.Key...), Value: append([]float32(nil), lc.Value...), Written: lc.Filled}
	if li.Layout == onnxgraph.LayoutRoll {
		st.Written = nil
		for _, f := range lc.Filled {
			if f {
				st.Filled++
			}
		}
	}
	return st.Feeds(onnxgraph.Float32, p, mv, sfx)
}

// CheckTextLength is the rule on how long a bundle's calibration text must
// be: its tokens must fill the export's context (positions 0 .. context-1,
// so the positions it encodes are all reached, past the sliding window
// where the ring caches wrap). A shorter text is an error naming the
// numbers, or with allowShort a warning with the same numbers.
func CheckTextLength(tokens, context, window int, allowShort bool) (warn string, err error) {
	if tokens >= context {
		return "", nil
	}
	past := fmt.Sprintf("never passes the sliding window of %d", window)
	if window > 0 && tokens > window {
		past = fmt.Sprintf("passes the sliding window of %d", window)
	}
	msg := fmt.Sprintf("the calibration text gives %d tokens, fewer than the export's context of %d: positions %d..%d are never observed, and the text %s", tokens, context, tokens, context-1, past)
	if allowShort {
		return msg + "; the ranges of those positions are extrapolated", nil
	}
	return "", fmt.Errorf("%s; give longer --samples (or --allow-short to bundle it anyway)", msg)
}

// CheckHeldOut is the rule on the held-out window: the n positions the
// simulation scores in each held-out sequence (0..n-1, the first positions
// of a conversation included) must fit the export's context.
func CheckHeldOut(n, context int) error {
	if n > context {
		return fmt.Errorf("--held-out %d: the export's context holds %d positions", n, context)
	}
	return nil
}
