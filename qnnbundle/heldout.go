package qnnbundle

import (
	"fmt"

	"sparkconv/calib"
	"sparkconv/forward"
	"sparkconv/onnxgraph"
	"sparkconv/tokenizer"
)

// MaxHeldOutPositions bounds the positions the simulation scores over
// every held-out sequence together: the reference's trace of each sequence
// (every layer's residual, keys and values, and the logits) is held until
// the last graph is simulated.
const MaxHeldOutPositions = 16384

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
// 1-based index among Source's samples, Tokens how many it gives, and
// Positions how many of them are scored (0..Positions-1: the first
// --held-out ones).
type HeldOutSequence struct {
	Source    string `json:"source"`
	Sample    int    `json:"sample"`
	Tokens    int    `json:"tokens"`
	Positions int    `json:"positions"`
}

// HeldOut is the held-out text the simulation scores, one sequence per
// sample, and the reference's trace of each.
type HeldOut struct {
	Files []HeldOutFile
	Seqs  []HeldOutSequence
	ids   [][]int // each sequence's scored tokens
	// traces, pos (positions 0..Positions-1) and chunks (full prefill
	// chunks among those positions), per sequence: set by trace.
	traces      []*Trace
	pos, chunks [][]int
}

// ReadHeldOut reads the held-out files in order (calib's samples formats;
// none: the built-in held-out text, disjoint from the embedded corpus),
// tokenizes each sample on its own and keeps its first n tokens, the
// positions the simulation scores; a sample shorter than n is scored at
// every position it has. Every sample is one sequence; the sequences
// together may hold at most MaxHeldOutPositions positions.
func ReadHeldOut(tok *tokenizer.Tokenizer, files []string, n, vocab int) (*HeldOut, error) {
	h := &HeldOut{}
	one := [][]string{nil}
	if len(files) > 0 {
		one = nil
		for _, f := range files {
			one = append(one, []string{f})
		}
	}
	total := 0
	for _, f := range one {
		var seqs []HeldOutSequence
		rd, err := calib.TokenizeEach(tok, f, calib.HeldOutText, vocab, func(i int, ids []int) (bool, error) {
			k := min(len(ids), n)
			total += k
			if total > MaxHeldOutPositions {
				return false, fmt.Errorf("the held-out samples give more than %d positions to score (%d samples so far, at most --held-out %d positions each): give fewer samples or a smaller --held-out",
					MaxHeldOutPositions, len(h.Seqs)+len(seqs)+1, n)
			}
			seqs = append(seqs, HeldOutSequence{Sample: i + 1, Tokens: len(ids), Positions: k})
			h.ids = append(h.ids, append([]int(nil), ids[:k]...))
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

// Longest is the most positions any sequence scores.
func (h *HeldOut) Longest() int {
	n := 0
	for _, s := range h.Seqs {
		n = max(n, s.Positions)
	}
	return n
}

// trace runs each sequence through the reference (its logits at every
// scored position kept) and lays out the positions each graph is scored
// at: every position of the sequence for a decode graph, and, for prefill
// graphs of prefill tokens (0: none), the full chunks among them.
func (h *HeldOut) trace(ref *forward.Model, man *onnxgraph.Manifest, prefill int) error {
	h.traces, h.pos, h.chunks = nil, nil, nil
	for i, ids := range h.ids {
		pos := make([]int, len(ids))
		for p := range pos {
			pos[p] = p
		}
		t, err := NewTrace(ref, man, ids, pos)
		if err != nil {
			return fmt.Errorf("%s: held-out sample %d: %w", h.Seqs[i].Source, h.Seqs[i].Sample, err)
		}
		var chunks []int
		for p := 0; prefill > 0 && p+prefill <= len(ids); p += prefill {
			chunks = append(chunks, p)
		}
		h.traces, h.pos, h.chunks = append(h.traces, t), append(h.pos, pos), append(h.chunks, chunks)
	}
	return nil
}

// samples is graph e's held-out samples, sequence after sequence, each
// with its Seq set; runs is how many there are.
func (h *HeldOut) samples(e onnxgraph.GraphEntry) (fn Samples, runs int) {
	at := h.pos
	if e.Decode != "" {
		at = h.chunks
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
