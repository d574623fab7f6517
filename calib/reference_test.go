package calib

import (
	"fmt"
	"math/rand/v2"
	"sort"

	"sparkconv/tokenizer"
)

// The whole-text forms of the rules, the references Take's streamed rules
// are checked against.

// Select keeps at most max samples (0 = all): a random subset drawn with
// seed when there are more, in their original order.
func Select(texts []Text, max int, seed uint64) []Text {
	if max <= 0 || max >= len(texts) {
		return texts
	}
	perm := rand.New(rand.NewPCG(seed, selectStream)).Perm(len(texts))[:max]
	sort.Ints(perm)
	out := make([]Text, max)
	for k, i := range perm {
		out[k] = texts[i]
	}
	return out
}

// Tokenize encodes every sample (with the tokenizer's special tokens, as
// transformers' tokenizer(text) does) and cuts each into chunks of at most
// seqLen tokens, keeping every token. It fails on a sample that gives no
// tokens or an id outside the model's vocabulary, naming the sample.
func Tokenize(tok *tokenizer.Tokenizer, texts []Text, seqLen, vocab int) ([]Chunk, []int, error) {
	if seqLen < 1 {
		return nil, nil, fmt.Errorf("sequence length %d, must be >= 1", seqLen)
	}
	var chunks []Chunk
	counts := make([]int, len(texts))
	for s, t := range texts {
		ids, err := encode(tok, t, vocab)
		if err != nil {
			return nil, nil, err
		}
		counts[s] = len(ids)
		chunks = appendChunks(chunks, s, ids, seqLen)
	}
	return chunks, counts, nil
}
