package qnnbundle

import (
	"fmt"
	"math"

	"sparkconv/calib"
	"sparkconv/onnxeval"
	"sparkconv/onnxio"
	"sparkconv/onnxpb"
	"sparkconv/qnn"
)

// This file is the weight search of a precision with Search (w4a16,
// docs/qnn.md#w4a16): while the observed positions of the calibration
// stream and of the calibration sequences set the activation ranges, each
// searched MatMul weight's input accumulates H = Σ x xᵀ over them, and
// qnn.SearchScales then chooses each output channel's grid by the
// H-weighted error, in place of the channel's absolute maximum.

// WeightSearch is a graph's record of the search in bundle.json.
type WeightSearch struct {
	// Weights is how many MatMul weights were searched, Rows the input
	// rows (tokens) each one's H holds.
	Weights int `json:"weights"`
	Rows    int `json:"rows"`
	// MeanClip is the mean chosen ratio c (scale = c absmax / (2^(bw-1)-1))
	// over every searched channel.
	MeanClip float64 `json:"mean_clip"`
	// GainDB is the mean over the searched weights of 10 log10(error of the
	// absmax grids / error of the chosen grids), the errors H-weighted.
	GainDB float64 `json:"error_gain_db"`
	// Blocked is how many of them got LPBQ block grids (w4a16-lpbq; the
	// others' input rows are no whole number of blocks), their MeanClip
	// over the blocks and their absmax grids AIMET's min-max LPBQ ones.
	Blocked int `json:"lpbq_weights,omitempty"`
	// Solved is how many of those had their codes solved (GPTQ on the
	// LPBQ grid; the graph holds the solved weights).
	Solved int `json:"solved_weights,omitempty"`
}

// BundleRecipe is bundle.json's record of a mixed recipe (w4a16): what
// the precision keeps at other widths and how its weights' grids were
// chosen.
type BundleRecipe struct {
	HeadBits       int    `json:"head_weight_bits"`
	KVBits         int    `json:"kv_cache_bits"`
	KVGrid         string `json:"kv_cache_grid"`
	EmbedBits      int    `json:"embedding_bits"`
	OtherParamBits int    `json:"other_param_bits"`
	WeightGrid     string `json:"weight_grid"`
	// PromotedGrid is the weight grid of a graph promoted out of the
	// recipe (Options.PromoteBelow), when any may be.
	PromotedGrid string `json:"promoted_weight_grid,omitempty"`
}

// RecipeOf is prec's BundleRecipe, or nil for a precision without mixed
// widths or a search (w8a16, w16a16, w8a8).
func RecipeOf(prec qnn.Precision) *BundleRecipe {
	if prec.HeadBits == 0 && prec.KVBits == 0 && prec.EmbedBits == 0 && !prec.Search {
		return nil
	}
	r := &BundleRecipe{HeadBits: prec.HeadBits, KVBits: prec.KVBits, EmbedBits: prec.EmbedBits, OtherParamBits: max(prec.WeightBits, 8),
		KVGrid:     "symmetric, per tensor, shared by each KV input, its output and every tensor tied to them; the observed range, no headroom",
		WeightGrid: fmt.Sprintf("%d-bit symmetric per output channel from each channel's absolute maximum", prec.WeightBits)}
	if prec.Search && prec.Block > 0 {
		r.WeightGrid = fmt.Sprintf("LPBQ (AIMET low-power blockwise): %d-bit symmetric codes in blocks of %d input rows, block scale = per-channel float scale x integer scale in 1..16 (bw 8 decompressed); each block's scale chosen by (w_b - w_q)^T H_bb (w_b - w_q), H = sum of x x^T over the MatMul's inputs on the observed positions (the calibration stream's and the calibration sequences'), then put on the LPBQ grid trying every integer scale",
			prec.WeightBits, prec.Block)
		if prec.Solve {
			r.WeightGrid += fmt.Sprintf("; the codes solved by GPTQ on that grid (H damped by %g of its mean diagonal), the graph's weights replaced by the solved ones, which lie on the grid", qnn.SolveDamp)
		}
	} else if prec.Search {
		r.WeightGrid = fmt.Sprintf("%d-bit symmetric per output channel, scale c absmax / %d with c in 0.50..1.00 minimising (w - w_q)^T H (w - w_q), H = sum of x x^T over the MatMul's inputs on the observed positions (the calibration stream's and the calibration sequences') (SeqMSE's per-channel search)",
			prec.WeightBits, 1<<(prec.WeightBits-1)-1)
	}
	return r
}

// weightSearch accumulates the H of every weight prec searches in one
// graph.
type weightSearch struct {
	order []string                  // searched weights, plan order
	input map[string]string         // weight -> its MatMul's input
	k     map[string]int            // weight -> its rows (input channels)
	hess  map[string]*calib.Hessian // MatMul input -> H
	// blocks are the LPBQ grids apply chose (w4a16-lpbq), solved the
	// weights SolveBlocks put on them (prec.Solve).
	blocks map[string]qnn.BlockScales
	solved map[string][]float32
}

// newWeightSearch returns the search of the MatMul weights plan encodes at
// prec's weight bits, or nil when prec does not search.
func newWeightSearch(m *onnxpb.ModelProto, plan *qnn.EncodingPlan, prec qnn.Precision, g *onnxeval.Graph) *weightSearch {
	if !prec.Search {
		return nil
	}
	reader := map[string]string{}
	for _, n := range m.GetGraph().GetNode() {
		if n.GetOpType() == "MatMul" && len(n.GetInput()) == 2 {
			if _, ok := reader[n.GetInput()[1]]; !ok {
				reader[n.GetInput()[1]] = n.GetInput()[0]
			}
		}
	}
	s := &weightSearch{input: map[string]string{}, k: map[string]int{}, hess: map[string]*calib.Hessian{}}
	for _, p := range plan.Params {
		in, ok := reader[p.Name]
		if p.Axis != 1 || !ok || plan.ParamBits(prec, p) != prec.WeightBits {
			continue
		}
		v, _ := g.Initializer(p.Name)
		if len(v.Shape) != 2 {
			continue
		}
		k := v.Shape[0]
		if h, ok := s.hess[in]; ok && h.K != k {
			continue
		}
		s.order = append(s.order, p.Name)
		s.input[p.Name], s.k[p.Name] = in, k
		if _, ok := s.hess[in]; !ok {
			s.hess[in] = calib.NewHessian(k)
		}
	}
	return s
}

// tap adds a computed tensor to H when it is a searched weight's input.
func (s *weightSearch) tap(name string, v onnxeval.Value) {
	if h, ok := s.hess[name]; ok && v.F != nil && len(v.F)%h.K == 0 {
		h.Add(v.F, len(v.F)/h.K)
	}
}

// apply chooses the grids of every searched weight: per channel it
// replaces the weight's absolute maxima in absmax with the chosen clipped
// ones; with prec.Block, a weight whose rows are a whole number of blocks
// gets an LPBQ grid (setBlocks writes it).
func (s *weightSearch) apply(g *onnxeval.Graph, prec qnn.Precision, absmax map[string][]float64) (*WeightSearch, error) {
	if s == nil || len(s.order) == 0 {
		return nil, nil
	}
	for _, h := range s.hess {
		h.Finish()
	}
	r := &WeightSearch{Weights: len(s.order)}
	var clips, gain float64
	var channels int
	for _, name := range s.order {
		h := s.hess[s.input[name]]
		if h.Tokens == 0 {
			return nil, fmt.Errorf("weight %s: its input %s was never computed on the observed positions", name, s.input[name])
		}
		r.Rows = int(h.Tokens)
		v, _ := g.Initializer(name)
		k, n := v.Shape[0], v.Shape[1]
		if prec.Block > 0 && k%prec.Block == 0 {
			res := qnn.SearchBlocks(v.F, k, n, h.H, prec.Block, false)
			s.setBlock(name, res.Scales)
			if prec.Solve {
				w, err := qnn.SolveBlocks(v.F, h.H, res.Scales, qnn.SolveDamp)
				if err != nil {
					return nil, fmt.Errorf("weight %s: %w", name, err)
				}
				s.solved[name] = w
				r.Solved++
			}
			r.Blocked++
			clips += res.MeanClip * float64(n)
			channels += n
			if res.Err > 0 && res.AbsmaxErr > 0 {
				gain += 10 * math.Log10(res.AbsmaxErr/res.Err)
			}
			continue
		}
		res := qnn.SearchScales(v.F, k, n, h.H, prec.WeightBits)
		for j, c := range res.Clip {
			if absmax[name][j] > 0 {
				clips += c / absmax[name][j]
			} else {
				clips++
			}
		}
		channels += n
		if res.Err > 0 && res.AbsmaxErr > 0 {
			gain += 10 * math.Log10(res.AbsmaxErr/res.Err)
		}
		absmax[name] = res.Clip
	}
	r.MeanClip = round4(clips / float64(channels))
	r.GainDB = round2(gain / float64(len(s.order)))
	return r, nil
}

func (s *weightSearch) setBlock(name string, b qnn.BlockScales) {
	if s.blocks == nil {
		s.blocks, s.solved = map[string]qnn.BlockScales{}, map[string][]float32{}
	}
	s.blocks[name] = b
}

// setBlocks replaces the parameter encoding of every weight apply gave an
// LPBQ grid with its LPBQ entry.
func (s *weightSearch) setBlocks(enc *qnn.Encodings) {
	if s == nil {
		return
	}
	for i, p := range enc.Params {
		if b, ok := s.blocks[p.Name]; ok {
			enc.Params[i] = b.Encoding(p.Name)
		}
	}
}

func round4(v float64) float64 { return math.Round(v*1e4) / 1e4 }

// tieParams gives every parameter encoding named in tie that encoding (a
// prefill graph's weights take its decode graph's grids: the two share
// the weights file).
func tieParams(enc *qnn.Encodings, tie map[string]qnn.Encoding) {
	for i, p := range enc.Params {
		if e, ok := tie[p.Name]; ok {
			enc.Params[i] = e
		}
	}
}

// solvedWeights are the weights SolveBlocks solved (nil for none).
func (s *weightSearch) solvedWeights() map[string][]float32 {
	if s == nil || len(s.solved) == 0 {
		return nil
	}
	return s.solved
}

// setWeights replaces the values of m's initializers named in w.
func setWeights(m *onnxpb.ModelProto, w map[string][]float32) error {
	done := 0
	for _, t := range m.GetGraph().GetInitializer() {
		v, ok := w[t.GetName()]
		if !ok {
			continue
		}
		if t.GetDataType() != int32(onnxpb.TensorProto_FLOAT) || int64(len(v)) != elems(t.GetDims()) {
			return fmt.Errorf("weight %s: %d solved values for a tensor of type %d, dims %v", t.GetName(), len(v), t.GetDataType(), t.GetDims())
		}
		t.FloatData, t.RawData, t.ExternalData, t.DataLocation = v, nil, nil, nil
		done++
	}
	if done != len(w) {
		return fmt.Errorf("%d solved weights, %d found in the graph", len(w), done)
	}
	return nil
}

func elems(dims []int64) int64 {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	return n
}

// decodeWeights reads the LPBQ weights of a decode graph's bundled model
// at path (its solved weights), for its prefill graph.
func decodeWeights(path string, dec *qnn.Encodings) (map[string][]float32, error) {
	lpbq := map[string]bool{}
	for _, p := range dec.Params {
		if p.EncType == qnn.LPBQ {
			lpbq[p.Name] = true
		}
	}
	if len(lpbq) == 0 {
		return nil, nil
	}
	m, err := onnxio.ReadModelWithData(path)
	if err != nil {
		return nil, err
	}
	out := map[string][]float32{}
	for _, t := range m.GetGraph().GetInitializer() {
		if !lpbq[t.GetName()] {
			continue
		}
		v, err := tensorFloat32(t)
		if err != nil {
			return nil, fmt.Errorf("%s: weight %s: %w", path, t.GetName(), err)
		}
		out[t.GetName()] = append([]float32(nil), v...)
	}
	return out, nil
}
