package qnnbundle

import (
	"fmt"

	"sparkconv/calib"
	"sparkconv/forward"
	"sparkconv/onnxgraph"
)

// Stream is token sequences advanced through the reference forward one
// layer at a time, in the order the bundle visits its graphs (embed, the
// layers ascending, head: onnxgraph.GraphOrder). It holds each sequence's
// residual where the stream stands and, per graph, the keys and values of
// that graph's layers only, so a bundle over many sequences holds one
// layer's cache of them rather than the whole model's. Each layer's
// weights are read once for all sequences. The numbers are the
// reference prefill's (ForwardLayer over the same rows).
type Stream struct {
	ref    *forward.Model
	man    *onnxgraph.Manifest
	held   [][]int // per sequence: positions whose logits the head's trace keeps
	label  func(i int) string
	loop   *calib.Loop // the sequences (Chunks) and each one's residual entering layer at
	at     int
	span   [2]int // the layers of cur; {-1, -1} before any
	logits bool   // cur holds the logits
	cur    []*Trace
}

// NewStream checks the sequences against the export (a float32 export;
// 1..context tokens each; held positions inside) and embeds them. label
// names sequence i in errors (nil: "sequence i").
func NewStream(ref *forward.Model, man *onnxgraph.Manifest, ids, held [][]int, label func(int) string) (*Stream, error) {
	if man.DType != "float32" {
		return nil, fmt.Errorf("the export is %s: a QNN bundle starts from a float32 export (AIMET encodings describe the float graph)", man.DType)
	}
	if label == nil {
		label = func(i int) string { return fmt.Sprintf("sequence %d", i) }
	}
	s := &Stream{ref: ref, man: man, held: held, label: label, span: [2]int{-1, -1}}
	chunks := make([]calib.Chunk, len(ids))
	for i, seq := range ids {
		if len(seq) == 0 || len(seq) > man.Context {
			return nil, fmt.Errorf("%s: %d tokens: want 1..%d (the export's context)", label(i), len(seq), man.Context)
		}
		if i < len(held) {
			for _, p := range held[i] {
				if p < 0 || p >= len(seq) {
					return nil, fmt.Errorf("%s: held-out position %d outside the %d tokens", label(i), p, len(seq))
				}
			}
		}
		chunks[i] = calib.Chunk{Sample: i, IDs: seq}
	}
	s.loop = &calib.Loop{Model: ref, Chunks: chunks, Label: label}
	if err := s.loop.Embed(); err != nil {
		return nil, err
	}
	return s, nil
}

// Traces returns each sequence's trace of graph e's part of the model: the
// residual entering its first layer and leaving its last and each of its
// layers' keys and values (an embed graph: the embedding; a head graph:
// the last residual and the logits at the held positions). Graphs come in
// GraphOrder; a graph over the layers of the one before (its prefill
// graph) gets the same traces.
func (s *Stream) Traces(e onnxgraph.GraphEntry) ([]*Trace, error) {
	L := s.ref.Cfg.NumLayers
	a, b := 0, -1
	switch e.Kind {
	case onnxgraph.KindEmbed:
	case onnxgraph.KindHead:
		a, b = L, L-1
	default:
		infos := e.LayerInfos()
		a, b = infos[0].Layer, infos[len(infos)-1].Layer
		for k, li := range infos {
			if li.Layer != a+k || li.Layer >= L {
				return nil, fmt.Errorf("%s: layers not consecutive within the model's %d", e.File, L)
			}
		}
	}
	logits := e.Kind == onnxgraph.KindHead
	if [2]int{a, b} == s.span && logits == s.logits {
		return s.cur, nil
	}
	ts, err := s.trace(a, b, logits)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e.File, err)
	}
	return ts, nil
}

// trace advances every sequence to layer a and through layers a..b,
// keeping the residual at a..b+1 and the keys and values of a..b, and,
// with logits, the logits at the held positions of the residual at b+1.
func (s *Stream) trace(a, b int, logits bool) ([]*Trace, error) {
	if a < s.at {
		return nil, fmt.Errorf("layer %d: the stream stands at layer %d (graphs in GraphOrder)", a, s.at)
	}
	s.cur, s.span = nil, [2]int{-1, -1} // free the last graph's caches first
	for ; s.at < a; s.at++ {
		if err := s.layer(s.at, nil); err != nil {
			return nil, err
		}
	}
	c := s.ref.Cfg
	ts := make([]*Trace, len(s.loop.Chunks))
	for i, ch := range s.loop.Chunks {
		ts[i] = &Trace{ids: ch.IDs, hidden: make([][]float32, c.NumLayers+1), key: make([][]float32, c.NumLayers),
			val: make([][]float32, c.NumLayers), logits: map[int][]float32{},
			h: c.HiddenSize, kvd: c.KVDim(), kvHeads: c.NumKVHeads, headDim: c.HeadDim, context: s.man.Context,
			maskValue: float32(s.man.MaskValue), layers: c.NumLayers}
		ts[i].hidden[a] = append([]float32(nil), s.loop.Streams[i]...)
	}
	for ; s.at <= b; s.at++ {
		if err := s.layer(s.at, ts); err != nil {
			return nil, err
		}
		for i := range ts {
			ts[i].hidden[s.at+1] = append([]float32(nil), s.loop.Streams[i]...)
		}
	}
	if logits {
		if err := s.logitsAt(ts, b+1); err != nil {
			return nil, err
		}
	}
	s.cur, s.span, s.logits = ts, [2]int{a, b}, logits
	return ts, nil
}

// layer runs layer l over every sequence, keeping its keys and values in
// ts (nil: dropped).
func (s *Stream) layer(l int, ts []*Trace) error {
	return s.loop.Layer(l, nil, func(i int, k, v []float32) {
		if ts != nil {
			ts[i].key[l], ts[i].val[l] = k, v
		}
	})
}

// logitsAt computes each trace's logits at its sequence's held positions
// from the residual at layer n.
func (s *Stream) logitsAt(ts []*Trace, n int) error {
	H := s.ref.Cfg.HiddenSize
	for i, t := range ts {
		if i >= len(s.held) || len(s.held[i]) == 0 {
			continue
		}
		fn := s.ref.FinalNorm(t.hidden[n])
		for _, p := range s.held[i] {
			l, err := s.ref.Logits(fn[p*H:(p+1)*H], 1)
			if err != nil {
				return fmt.Errorf("%s: %w", s.label(i), err)
			}
			t.logits[p] = l
		}
	}
	return nil
}
