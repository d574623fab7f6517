package qnnbundle

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"sparkconv/onnxgraph"
	"sparkconv/qnn"
)

// This file is the bundle's side of the prefill graphs
// (docs/qnn.md#prefill-graphs-in-the-bundle): their samples are chunks of N
// tokens at real prefill positions of the calibration trace, fed as the
// host loop feeds them, and their encodings are tied to their decode
// graph's wherever the two graphs hold the same tensor.

// BundlePrefill records what the bundle did for the prefill graphs: the
// chunk starts whose activations set the ranges (Observed), that went into
// the npz (Positions), and the whole chunks of the longest held-out
// sequence (HeldOut; each sequence is scored at its own whole chunks);
// every chunk is Tokens real tokens. Each prefill graph's entry
// in the bundle's graphs counts its tied encodings.
type BundlePrefill struct {
	Tokens   int   `json:"tokens"`
	Observed []int `json:"observed_chunks"`
	Chunks   []int `json:"chunks"`
	HeldOut  []int `json:"held_out_chunks"`
}

// PrefillPositions are the chunk starts of prefill graphs of n tokens:
// every full chunk of the calibration trace (tokens long) is observed,
// calib of them spread over it go into the npz, and every full chunk of
// the longest held-out sequence (held positions) is listed: each sequence
// is simulated at its own full chunks.
func PrefillPositions(n, tokens, held, calib int) (Positions, error) {
	full := func(t int) []int {
		var out []int
		for p := 0; p+n <= t; p += n {
			out = append(out, p)
		}
		return out
	}
	pos := Positions{Observe: full(tokens), Held: full(held)}
	if len(pos.Observe) == 0 {
		return pos, fmt.Errorf("the calibration text gives %d tokens, fewer than one prefill chunk of %d", tokens, n)
	}
	if len(pos.Held) == 0 {
		return pos, fmt.Errorf("the longest held-out sequence scores %d positions, fewer than one prefill chunk of %d tokens (raise --held-out, or give longer held-out samples)", held, n)
	}
	idx, _ := SamplePositions(min(calib, len(pos.Observe)), 0, len(pos.Observe)-1)
	for _, i := range idx {
		pos.Calib = append(pos.Calib, pos.Observe[i])
	}
	return pos, nil
}

// prefillSamples is Samples for a prefill graph of n tokens: positions are
// ascending chunk starts; each sample is the chunk's n tokens, with the
// caches as the host loop leaves them after the positions before it
// (onnxgraph's CacheState.Put of the trace's entries) and the mask and
// rope rows of PrefillFeeds; Want holds the reference's output rows.
func (t *Trace) prefillSamples(e onnxgraph.GraphEntry, starts []int, want bool, fn func(Sample) error) error {
	n := t.prefillTokens(e)
	if n < 1 {
		return fmt.Errorf("%s: no [1,N,...] input to read N from", e.File)
	}
	for k, p := range starts {
		if p+n > len(t.ids) || (k > 0 && p <= starts[k-1]) {
			return fmt.Errorf("%s: chunk at %d not ascending or past the %d traced tokens", e.File, p, len(t.ids))
		}
	}
	H, kvd := int64(t.h), t.kvd
	infos := e.LayerInfos()
	states := make([]*onnxgraph.CacheState, len(infos))
	for k, li := range infos {
		if li.Layer >= t.layers {
			return fmt.Errorf("%s: layer %d, the model has %d", e.File, li.Layer, t.layers)
		}
		var err error
		if states[k], err = onnxgraph.NewCacheState(&e, li, rand.New(rand.NewPCG(0, 0)), 0, 0); err != nil {
			return err
		}
	}
	rows := func(i, p int) []float32 { return append([]float32(nil), t.hidden[i][p*t.h:(p+n)*t.h]...) }
	done := 0
	for _, p := range starts {
		s := Sample{Pos: p, Feeds: map[string]onnxgraph.Tensor{}}
		if want {
			s.Want = map[string][]float32{}
		}
		if e.Kind == onnxgraph.KindEmbed {
			s.Feeds["input_ids"] = onnxgraph.PrefillIDs(t.ids, onnxgraph.Chunk{Start: p, Valid: n}, n)
			if want {
				s.Want["hidden_out"] = rows(0, p)
			}
		} else {
			s.Feeds["hidden_in"] = onnxgraph.F32Tensor([]int64{1, int64(n), H}, rows(infos[0].Layer, p))
			for k, li := range infos {
				if p > done {
					states[k].Put(done, t.key[li.Layer][done*kvd:p*kvd], t.val[li.Layer][done*kvd:p*kvd])
				}
				for name, v := range states[k].PrefillFeeds(onnxgraph.Float32, p, n, t.maskValue, onnxgraph.LayerSuffix(e.Kind, li.Layer)) {
					v.F32 = append([]float32(nil), v.F32...) // the cache moves on
					s.Feeds[name] = v
				}
			}
			done = p
			if want {
				s.Want["hidden_out"] = rows(infos[len(infos)-1].Layer+1, p)
			}
		}
		if err := fn(s); err != nil {
			return err
		}
	}
	return nil
}

// prefillTokens reads a prefill graph's N from its first input ([1,N] ids
// or [1,N,H] residual); 0 when it has none.
func (t *Trace) prefillTokens(e onnxgraph.GraphEntry) int {
	if len(e.Inputs) == 0 || len(e.Inputs[0].Shape) < 2 {
		return 0
	}
	return int(e.Inputs[0].Shape[1])
}

// PrefillTies returns what a prefill graph takes from its decode graph's
// encodings (decode, as the bundle wrote them): the encoding of every
// activation the two graphs share, by name: the graph inputs and outputs
// (hidden_in, rope_cos/rope_sin, the KV caches, the mask, hidden_out,
// new_key/new_value) and the tensors the manifest's values name after the
// same reference point. Weights need no tie: the same weights give the
// same parameter encodings.
func PrefillTies(decode *qnn.Encodings, dg, pg onnxgraph.GraphEntry) map[string]qnn.Encoding {
	shared := map[string]bool{}
	for _, list := range [][]onnxgraph.TensorSpec{pg.Inputs, pg.Outputs} {
		for _, s := range list {
			if _, ok := dg.Tensor(s.Name); ok {
				shared[s.Name] = true
			}
		}
	}
	points := map[string]onnxgraph.ValueName{}
	for _, v := range dg.Values {
		points[v.Name] = v
	}
	for _, v := range pg.Values {
		if d, ok := points[v.Name]; ok && d == v {
			shared[v.Name] = true
		}
	}
	out := map[string]qnn.Encoding{}
	for _, a := range decode.Activations {
		if shared[a.Name] {
			out[a.Name] = a
		}
	}
	return out
}

// tieRanges makes each tied encoding's range a fixed range of the graph,
// so that the groups holding tied tensors get those ranges whole.
func tieRanges(fixed qnn.Ranges, tie map[string]qnn.Encoding) {
	for name, e := range tie {
		lo, hi := e.MinMax(0)
		fixed[name] = [2]float64{lo, hi}
	}
}

// applyTies gives every activation whose group holds a tied tensor exactly
// that tensor's encoding (the grid recomputed from its range may differ in
// the last bit), and returns how many encodings it set.
func applyTies(enc *qnn.Encodings, plan *qnn.EncodingPlan, tie map[string]qnn.Encoding) int {
	if len(tie) == 0 {
		return 0
	}
	byGroup := map[string]qnn.Encoding{}
	for name, e := range tie {
		byGroup[plan.Group(name)] = e
	}
	n := 0
	for i, a := range enc.Activations {
		if e, ok := byGroup[plan.Group(a.Name)]; ok {
			enc.Activations[i] = e.Renamed(a.Name)
			enc.Policy[a.Name] = qnn.PolicyDecodeTie
			n++
		}
	}
	return n
}

// linkOrCopy puts src at dst as a hard link, or a copy where the two lie
// on different file systems (a shared weights file goes into each .aimet
// folder that refers to it, without a second copy on disk).
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	return copyFile(src, dst)
}

// externalFile is the path of graph e's weights file in the export dir
// ("" when its weights are inline).
func externalFile(dir string, e onnxgraph.GraphEntry) string {
	if e.ExternalData == nil {
		return ""
	}
	return filepath.Join(dir, e.ExternalData.Name)
}
