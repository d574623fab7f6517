package qnnbundle

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"

	"sparkconv/forward"
	"sparkconv/onnxgraph"
	"sparkconv/onnxio"
	"sparkconv/ortrun"
	"sparkconv/quant"
)

// SimResult is one QDQ graph's agreement with the float32 reference on the
// held-out sequences (each held-out sample traced as its own sequence from
// position 0). Every SNR weighs each position equally: it is
// 10*log10(n / Σ_p noise_p/signal_p) over the n positions, so that a
// position of large norm (an attention sink's residual holds thousands)
// neither hides the others' error nor is hidden by them.
type SimResult struct {
	// SNR is of hidden_out (embed, layer, block) or logits (head), pooled
	// over every position of every sequence.
	SNR float64
	// Delta is the pooled SNR of the residual delta hidden_out - hidden_in:
	// the layer's own contribution, which the residual's SNR flatters.
	Delta *float64
	// Sequences is the SNR of each held-out sequence over its own
	// positions (+Inf for a sequence the graph reproduces exactly, NaN for
	// one it was not scored on); WorstSeq is the lowest, of sequence
	// WorstSeqIdx.
	Sequences   []float64
	WorstSeq    float64
	WorstSeqIdx int
	// Worst is the lowest SNR of one position, at WorstPos of sequence
	// WorstPosSeq.
	Worst       float64
	WorstPos    int
	WorstPosSeq int
	// Top1 is the head's share of held-out positions whose arg-max logit
	// matches the reference's.
	Top1 *float64
}

// SimOptimize is the ONNX Runtime optimization level of the simulation:
// "basic" folds constants (the weights' DequantizeLinear) but leaves every
// activation's Q/DQ pair in place, so ORT computes in float between
// quantizers (fake quantization) instead of fusing them into its own
// integer kernels.
const SimOptimize = "basic"

// Samples calls fn with each held-out sample in turn (qnn.Trace.Samples
// with the reference's outputs), so a long held-out window is never held
// in memory at once.
type Samples func(fn func(Sample) error) error

// Simulate runs the QDQ graph at path (a graph of qnn-bundle's qdq/
// folder) in ONNX Runtime on the held-out samples of sequences sequences
// (Sample.Seq) and compares it with the reference outputs captured beside
// them.
func Simulate(path string, e onnxgraph.GraphEntry, held Samples, sequences, threads int) (SimResult, error) {
	r, err := simulateGraph(path, e, held, sequences, threads)
	if err != nil {
		return SimResult{}, fmt.Errorf("simulating %s: %w", e.File, err)
	}
	return r, nil
}

// posSNR accumulates per-position noise-to-signal ratios.
type posSNR struct {
	n          int
	nsr, worst float64
	worstPos   int
	worstSet   bool
}

// add counts one position's errors; it reports whether the position is
// the worst so far.
func (a *posSNR) add(pos int, s quant.ErrStats) bool {
	a.n++
	r := s.SumErrSq / s.SumSq
	if s.SumSq == 0 {
		r = math.Inf(1)
		if s.SumErrSq == 0 {
			r = 0
		}
	}
	a.nsr += r
	if !a.worstSet || r > a.worst {
		a.worst, a.worstPos, a.worstSet = r, pos, true
		return true
	}
	return false
}

func (a *posSNR) db() float64 { return float64(-10 * math.Log10(a.nsr/float64(a.n))) }

// seqSNR accumulates per-position ratios pooled over every sequence and
// per sequence.
type seqSNR struct {
	pooled posSNR
	seqs   []posSNR
	// worstSeq is the sequence of pooled's worst position.
	worstSeq int
}

func (a *seqSNR) add(seq, pos int, s quant.ErrStats) {
	for len(a.seqs) <= seq {
		a.seqs = append(a.seqs, posSNR{})
	}
	if a.pooled.add(pos, s) {
		a.worstSeq = seq
	}
	a.seqs[seq].add(pos, s)
}

// result is the pooled SNR, each of n sequences' SNR (NaN where a
// sequence has no position), the worst sequence and the worst position.
func (a *seqSNR) result(n int) (r SimResult) {
	r.SNR = a.pooled.db()
	r.Worst, r.WorstPos, r.WorstPosSeq = -10*math.Log10(a.pooled.worst), a.pooled.worstPos, a.worstSeq
	r.Sequences = make([]float64, n)
	r.WorstSeq, r.WorstSeqIdx = math.NaN(), -1
	for i := range r.Sequences {
		r.Sequences[i] = math.NaN()
		if i >= len(a.seqs) || a.seqs[i].n == 0 {
			continue
		}
		v := a.seqs[i].db()
		r.Sequences[i] = v
		if r.WorstSeqIdx < 0 || v < r.WorstSeq {
			r.WorstSeq, r.WorstSeqIdx = v, i
		}
	}
	return r
}

func simulateGraph(path string, e onnxgraph.GraphEntry, held Samples, sequences, threads int) (SimResult, error) {
	s, err := openFolded(path, ortrun.SessionOptions{Threads: threads, Optimize: SimOptimize})
	if err != nil {
		return SimResult{}, err
	}
	defer s.Close()
	want := "hidden_out"
	if e.Kind == onnxgraph.KindHead {
		want = "logits"
	}
	var main seqSNR
	var delta posSNR
	top1 := 0
	// A prefill graph's sample is a chunk of rows, one position each: each
	// is scored on its own, as the decode step's positions are.
	rows := 1
	if t, ok := e.Tensor(want); ok && len(t.Shape) == 3 {
		rows = int(t.Shape[1])
	}
	err = held(func(sm Sample) error {
		got, err := s.Run(sm.Feeds)
		if err != nil {
			return fmt.Errorf("held-out sample %d, position %d: %w", sm.Seq, sm.Pos, err)
		}
		ref, y := sm.Want[want], got[want].Floats()
		w := len(ref) / rows
		for r := range rows {
			main.add(sm.Seq, sm.Pos+r, quant.Compare(ref[r*w:(r+1)*w], y[r*w:(r+1)*w]))
		}
		if in, ok := sm.Feeds["hidden_in"]; ok && want == "hidden_out" {
			dr, dy := make([]float32, len(ref)), make([]float32, len(ref))
			for i, x := range in.F32 {
				dr[i], dy[i] = ref[i]-x, y[i]-x
			}
			for r := range rows {
				delta.add(sm.Pos+r, quant.Compare(dr[r*w:(r+1)*w], dy[r*w:(r+1)*w]))
			}
		}
		if want == "logits" && forward.ArgMax(ref) == forward.ArgMax(y) {
			top1++
		}
		return nil
	})
	if err != nil {
		return SimResult{}, err
	}
	if main.pooled.n == 0 {
		return SimResult{}, fmt.Errorf("no held-out positions")
	}
	if len(main.seqs) > sequences {
		return SimResult{}, fmt.Errorf("held-out sample %d of %d", len(main.seqs)-1, sequences)
	}
	r := main.result(sequences)
	if e.Kind == onnxgraph.KindLayer || e.Kind == onnxgraph.KindBlock {
		d := delta.db()
		r.Delta = &d
	}
	if want == "logits" {
		t := float64(top1) / float64(main.pooled.n)
		r.Top1 = &t
	}
	return r, nil
}

// openFolded opens the QDQ graph at path in ONNX Runtime with its weights'
// DequantizeLinear folded (FoldWeights: the same graph, without
// dequantizing every weight at every step). The folded graph goes through
// a file beside path, removed once the session holds it, so that a
// 1 GB table is not held by this process and by ONNX Runtime at once.
func openFolded(path string, opt ortrun.SessionOptions) (*ortrun.Session, error) {
	m, err := onnxio.ReadModelWithData(path)
	if err != nil {
		return nil, err
	}
	if _, err := FoldWeights(m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), ".folded-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, filepath.Base(path))
	if _, err := onnxio.WriteFile(tmp, onnxio.Model{Proto: m}, onnxio.WriteOptions{}); err != nil {
		return nil, fmt.Errorf("%s folded: %w", path, err)
	}
	m = nil
	debug.FreeOSMemory()
	return ortrun.OpenSession(tmp, opt)
}
