package qnnbundle

import (
	"fmt"
	"math"

	"sparkconv/calib"
	"sparkconv/forward"
	"sparkconv/onnxgraph"
	"sparkconv/tokenizer"
)

// MaxHeldOutTokens bounds the tokens traced over every held-out sequence
// together: the reference's trace of each sequence (every layer's
// residual, keys and values, and the logits at the scored positions) is
// held until the last graph is simulated.
const MaxHeldOutTokens = 16384

// DefaultHeldOutPositions is how many positions of each held-out sequence
// the simulation scores when Options.HeldOutPositions is 0
// (ScoredPositions): with the built-in held-out text's 10 samples, about
// as many graph runs as one sequence scored at every position of 256.
const DefaultHeldOutPositions = 32

// ScoredPositions are the k positions of a window of n tokens (0..n-1)
// the simulation scores: every position when k >= n, else spaced evenly
// in log(1+p) from 0 to n-1 (each at least one past the previous): dense
// at the start of a conversation, where the caches are nearly empty and
// position 0 becomes the attention sink, sparser later, and the last
// position, where the caches are fullest (past the sliding window where it
// wraps), always included.
func ScoredPositions(k, n int) []int {
	if n <= 0 || k <= 0 {
		return nil
	}
	if k >= n {
		k = n
	}
	out := make([]int, 0, k)
	if k == 1 {
		return append(out, 0)
	}
	prev := -1
	for i := range k {
		p := int(math.Round(math.Exp(float64(i)*math.Log(float64(n))/float64(k-1)) - 1))
		p = min(max(p, prev+1), n-k+i)
		out = append(out, p)
		prev = p
	}
	return out
}

// HeldOutFile records one held-out text read: a --held-out-samples file or
// the built-in held-out text, the sha256 of its bytes and how many samples
// it holds.
type HeldOutFile struct {
	Source  string `json:"source"`
	SHA256  string `json:"sha256"`
	Samples int    `json:"samples"`
}

// HeldOutSequence is one held-out sample, scored as a sequence of its own
// (a new conversation: position 0 on an empty cache): Sample is its
// 1-based index among Source's samples, Tokens how many it gives, Window
// how many of them are traced (the first --held-out) and Positions the
// positions of the window the simulation scores (ScoredPositions).
type HeldOutSequence struct {
	Source    string `json:"source"`
	Sample    int    `json:"sample"`
	Tokens    int    `json:"tokens"`
	Window    int    `json:"window"`
	Positions []int  `json:"positions"`
}

// HeldOut is the held-out text the simulation scores, one sequence per
// sample, and the reference's trace of each.
type HeldOut struct {
	Files []HeldOutFile
	Seqs  []HeldOutSequence
	ids   [][]int // each sequence's window of tokens
	// st advances the sequences through the reference (set by stream);
	// traces are its traces of the graph at hand (set by at); chunks are
	// the whole prefill chunks of each window.
	st     *Stream
	traces []*Trace
	chunks [][]int
}

// ReadHeldOut reads the held-out files in order (calib's samples formats;
// none: the built-in held-out text, disjoint from the embedded corpus),
// tokenizes each sample on its own and keeps its first n tokens (the
// window; a shorter sample all of its tokens), of which k positions are
// scored (ScoredPositions). Every sample is one sequence; the windows
// together may hold at most MaxHeldOutTokens tokens.
func ReadHeldOut(tok *tokenizer.Tokenizer, files []string, n, k, vocab int) (*HeldOut, error) {
	groups := [][]string{nil}
	if len(files) > 0 {
		groups = nil
		for _, f := range files {
			groups = append(groups, []string{f})
		}
	}
	return readSequences(tok, groups, calib.HeldOutText, n, k, vocab, 0)
}

// ReadCalibSequences reads the first m samples of the calibration text
// (files, calib's samples formats; none: the embedded corpus) as
// sequences of their own, as ReadHeldOut reads held-out text: each its
// first n tokens, k positions of them (ScoredPositions) observed.
func ReadCalibSequences(tok *tokenizer.Tokenizer, files []string, n, k, vocab, m int) (*HeldOut, error) {
	return readSequences(tok, [][]string{files}, calib.CalibText, n, k, vocab, m)
}

// readSequences reads each group of files in turn (a nil group: def), at
// most m samples in all (0: every sample).
func readSequences(tok *tokenizer.Tokenizer, groups [][]string, def calib.Builtin, n, k, vocab, m int) (*HeldOut, error) {
	h := &HeldOut{}
	total := 0
	for _, f := range groups {
		var seqs []HeldOutSequence
		rd, err := calib.TokenizeEach(tok, f, def, vocab, func(i int, ids []int) (bool, error) {
			if m > 0 && len(h.Seqs)+len(seqs) >= m {
				return false, nil
			}
			w := min(len(ids), n)
			total += w
			if total > MaxHeldOutTokens {
				return false, fmt.Errorf("the held-out samples give more than %d tokens to trace (%d samples so far, at most --held-out %d tokens each): give fewer samples or a smaller --held-out",
					MaxHeldOutTokens, len(h.Seqs)+len(seqs)+1, n)
			}
			seqs = append(seqs, HeldOutSequence{Sample: i + 1, Tokens: len(ids), Window: w, Positions: ScoredPositions(k, w)})
			h.ids = append(h.ids, append([]int(nil), ids[:w]...))
			return true, nil
		})
		if err != nil {
			return nil, err
		}
		for i := range seqs {
			seqs[i].Source = rd.Sources[0]
		}
		h.Seqs = append(h.Seqs, seqs...)
		h.Files = append(h.Files, HeldOutFile{Source: rd.Sources[0], SHA256: rd.SHA256, Samples: rd.Samples})
	}
	if len(h.Seqs) == 0 {
		return nil, fmt.Errorf("the held-out text holds no sample")
	}
	return h, nil
}

// Longest is the longest window of any sequence.
func (h *HeldOut) Longest() int {
	n := 0
	for _, s := range h.Seqs {
		n = max(n, s.Window)
	}
	return n
}

// stream starts the sequences' Stream through the reference (each
// sequence's logits kept at its scored positions) and lays out where each
// graph is scored: the sequence's scored positions for a decode graph,
// and, for prefill graphs of prefill tokens (0: none), every whole chunk
// of the window.
func (h *HeldOut) stream(ref *forward.Model, man *onnxgraph.Manifest, prefill int) error {
	h.traces, h.chunks = nil, nil
	held := make([][]int, len(h.ids))
	for i, ids := range h.ids {
		held[i] = h.Seqs[i].Positions
		var chunks []int
		for p := 0; prefill > 0 && p+prefill <= len(ids); p += prefill {
			chunks = append(chunks, p)
		}
		h.chunks = append(h.chunks, chunks)
	}
	var err error
	h.st, err = NewStream(ref, man, h.ids, held, func(i int) string {
		return fmt.Sprintf("%s: held-out sample %d", h.Seqs[i].Source, h.Seqs[i].Sample)
	})
	return err
}

// at advances the sequences' stream to graph e: samples then gives e's.
func (h *HeldOut) at(e onnxgraph.GraphEntry) error {
	var err error
	h.traces, err = h.st.Traces(e)
	return err
}

// samples is graph e's held-out samples, sequence after sequence, each
// with its Seq set; runs is how many there are.
func (h *HeldOut) samples(e onnxgraph.GraphEntry) (fn Samples, runs int) {
	at := h.chunks
	if e.Decode == "" {
		at = make([][]int, len(h.Seqs))
		for i, s := range h.Seqs {
			at[i] = s.Positions
		}
	}
	for _, p := range at {
		runs += len(p)
	}
	return func(fn func(Sample) error) error {
		for i, t := range h.traces {
			if len(at[i]) == 0 {
				continue
			}
			err := t.Samples(e, at[i], true, func(s Sample) error {
				s.Seq = i
				return fn(s)
			})
			if err != nil {
				return fmt.Errorf("%s: held-out sample %d: %w", h.Seqs[i].Source, h.Seqs[i].Sample, err)
			}
		}
		return nil
	}, runs
}
