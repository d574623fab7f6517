package gptq

import (
	"math/bits"
	"slices"
	"sort"

	"sparkconv/calib"
	"sparkconv/tokenizer"
)

// Defaults of the calibration (flags --tokens and --seq-len).
const (
	// DefaultBudget is the number of calibration tokens run through the
	// model. The widest linear input (down_proj, K = 6656) needs more rows
	// than channels for a full-rank Hessian: with 2048 rows its GPTQ codes
	// overfit (in-sample error 0.0008 against 0.0044 on fresh rows). 8192
	// tokens (7373 in the Hessians, 819 held out) is the whole embedded
	// corpus on a vocabulary the size of Spark's. On the real model's
	// W4A16, 2048 tokens cost 17 % in mean KLD and 16384 gain nothing
	// measurable (docs/calibration.md#token-budget).
	DefaultBudget = 8192
	// DefaultBudget4 is the 4-bit formats' budget (gptq, w4a16): with the
	// float target (DefaultFloatTarget) the cross term C needs more rows
	// than H alone. On the real model's W4A16 with the float target, the
	// whole embedded corpus (25 795 tokens on its vocabulary) takes the
	// mean KLD on testdata/real/heldout.txt from 0.0488 at 8192 to 0.0434;
	// without the float target, from 0.0518 to 0.0506
	// (docs/calibration.md#float-target).
	DefaultBudget4 = 32768
	// DefaultFloatTarget is the 4-bit formats' float target weight
	// (--float-target): on the real model's W4A16 at DefaultBudget4, 0.15
	// gives 0.0454, 0.25 0.0434, 0.5 0.0455 (heldout.txt).
	DefaultFloatTarget = 0.25
	DefaultSeqLen      = 512
	// MinTokens is the fewest calibration tokens accepted (calib's rule).
	MinTokens = calib.MinTokens
)

// selectUnit is how many more tokens each sample gives per round of
// selectChunks.
const selectUnit = 64

// selectChunks keeps budget tokens spread over the samples: round after
// round, every sample's prefix grows by selectUnit tokens (the samples
// visited in van der Corput order of their position, 0, 1/2, 1/4, 3/4,
// ..., so that the budget's end does not cut off one end of the corpus:
// the embedded corpus runs English, code, Chinese, tool calls in turn)
// until the budget is spent; each prefix is then cut into chunks of at most
// seqLen tokens. A budget below the corpus thus takes a shorter prefix of
// every sample rather than whole samples from its start. chunks hold every
// sample of the text (Tokenize refuses one without tokens), so a sample's
// position is its index.
func selectChunks(chunks []calib.Chunk, budget, seqLen int) []calib.Chunk {
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
	var out []calib.Chunk
	for _, smp := range order {
		p := ids[smp][:taken[smp]]
		for a := 0; a < len(p); a += seqLen {
			out = append(out, calib.Chunk{Sample: smp, Start: a, IDs: p[a:min(a+seqLen, len(p))]})
		}
	}
	return out
}

// takeRoundRobin is how many tokens of each sample selectChunks takes:
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

// ReadChunks is the calibration chunks a conversion runs on (the files, or
// the embedded corpus when none): it reads and encodes the text for selectChunks with
// the budget applied while reading: after each batch of samples, every
// sample read so far is cut to what selectChunks would take of it among
// the samples read so far, and one it would take nothing of is dropped.
// Samples read later only take from the others, never give back, so the
// cut keeps everything the whole text's selection takes, and the result
// is selectChunks' on the whole text; memory holds about twice the budget,
// not the text.
func ReadChunks(tok *tokenizer.Tokenizer, files []string, vocab, budget, seqLen int) ([]calib.Chunk, calib.Read, error) {
	ids := map[int][]int{}
	var order []int
	held := 0
	prune := func() {
		taken := takeRoundRobin(ids, order, budget)
		kept, n := order[:0], 0
		for _, smp := range order {
			if taken[smp] == 0 {
				delete(ids, smp)
				continue
			}
			ids[smp] = slices.Clone(ids[smp][:taken[smp]])
			kept = append(kept, smp)
			n += taken[smp]
		}
		order, held = kept, n
	}
	rd, err := calib.TokenizeEach(tok, files, calib.CalibText, vocab, func(i int, s []int) (bool, error) {
		ids[i] = s[:min(len(s), budget)]
		order = append(order, i)
		if held += len(ids[i]); held > 2*budget {
			prune()
		}
		return true, nil
	})
	if err != nil {
		return nil, calib.Read{}, err
	}
	var chunks []calib.Chunk
	for _, smp := range order {
		chunks = append(chunks, calib.Chunk{Sample: smp, IDs: ids[smp]})
	}
	return selectChunks(chunks, budget, seqLen), rd, nil
}

// vanDerCorput is the base-2 radical inverse of i, in [0, 1).
func vanDerCorput(i uint32) float64 {
	return float64(bits.Reverse32(i)) / (1 << 32)
}
