package calib

import (
	"math/bits"
	"slices"
	"sort"
)

// Share takes Budget tokens spread over the samples, a share of every
// sample (GPTQ's calibration: gptq, w4a16, w8a8), each sample's share cut
// into chunks of at most SeqLen tokens: shareChunks' selection on the
// whole text, with the budget applied while reading. After each batch of
// samples, every sample read so far is cut to what shareChunks would take
// of it among the samples read so far, and one it would take nothing of is
// dropped. Samples read later only take from the others, never give back,
// so the cut keeps everything the whole text's selection takes; memory
// holds about twice the budget, not the text.
type Share struct {
	Budget, SeqLen int
	ids            map[int][]int
	order          []int
	held           int
}

func (s *Share) count() bool  { return false }
func (s *Share) valid() error { return validSeqLen(s.SeqLen) }
func (s *Share) start(int)    { s.ids = map[int][]int{} }
func (s *Share) offer(i int, _ Text, ids []int) bool {
	s.ids[i] = ids[:min(len(ids), s.Budget)]
	s.order = append(s.order, i)
	if s.held += len(s.ids[i]); s.held > 2*s.Budget {
		s.prune()
	}
	return true
}

// prune cuts every sample held to what the selection takes of it.
func (s *Share) prune() {
	taken := takeRoundRobin(s.ids, s.order, s.Budget)
	kept, n := s.order[:0], 0
	for _, smp := range s.order {
		if taken[smp] == 0 {
			delete(s.ids, smp)
			continue
		}
		s.ids[smp] = slices.Clone(s.ids[smp][:taken[smp]])
		kept = append(kept, smp)
		n += taken[smp]
	}
	s.order, s.held = kept, n
}

func (s *Share) take() ([]Chunk, []Text) {
	var chunks []Chunk
	for _, smp := range s.order {
		chunks = append(chunks, Chunk{Sample: smp, IDs: s.ids[smp]})
	}
	return shareChunks(chunks, s.Budget, s.SeqLen), nil
}

// selectUnit is how many more tokens each sample gives per round of
// shareChunks.
const selectUnit = 64

// shareChunks keeps budget tokens spread over the samples: round after
// round, every sample's prefix grows by selectUnit tokens (the samples
// visited in van der Corput order of their position, 0, 1/2, 1/4, 3/4,
// ..., so that the budget's end does not cut off one end of the corpus:
// the embedded corpus runs English, code, Chinese, tool calls in turn)
// until the budget is spent; each prefix is then cut into chunks of at most
// seqLen tokens. A budget below the corpus thus takes a shorter prefix of
// every sample rather than whole samples from its start. chunks hold every
// sample of the text (Tokenize refuses one without tokens), so a sample's
// position is its index.
func shareChunks(chunks []Chunk, budget, seqLen int) []Chunk {
	ids := map[int][]int{}
	var order []int
	for _, c := range chunks {
		if _, ok := ids[c.Sample]; !ok {
			order = append(order, c.Sample)
		}
		ids[c.Sample] = append(ids[c.Sample], c.IDs...)
	}
	sort.Ints(order)
	taken := takeRoundRobin(ids, order, budget)
	var out []Chunk
	for _, smp := range order {
		p := ids[smp][:taken[smp]]
		for a := 0; a < len(p); a += seqLen {
			out = append(out, Chunk{Sample: smp, Start: a, IDs: p[a:min(a+seqLen, len(p))]})
		}
	}
	return out
}

// takeRoundRobin is how many tokens of each sample shareChunks takes:
// the samples (order: their indices, ascending) visited in van der Corput
// order of their index, selectUnit more tokens each round.
func takeRoundRobin(ids map[int][]int, order []int, budget int) map[int]int {
	visit := slices.Clone(order)
	sort.SliceStable(visit, func(a, b int) bool { return vanDerCorput(uint32(visit[a])) < vanDerCorput(uint32(visit[b])) })
	taken := map[int]int{}
	total := 0
	for more := true; more && total < budget; {
		more = false
		for _, smp := range visit {
			n := min(selectUnit, len(ids[smp])-taken[smp], budget-total)
			if n > 0 {
				taken[smp] += n
				total += n
				more = true
			}
		}
	}
	return taken
}

// vanDerCorput is the base-2 radical inverse of i, in [0, 1).
func vanDerCorput(i uint32) float64 {
	return float64(bits.Reverse32(i)) / (1 << 32)
}
