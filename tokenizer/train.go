package tokenizer

import (
	"bytes"
	"container/heap"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
)

// TrainSpecialTokens are the added tokens TrainByteLevelBPE appends, in id
// order, after the model vocabulary.
var TrainSpecialTokens = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}

// trainFillerFormat names the vocabulary entries that pad a trained model
// to the requested size when the corpus runs out of pairs to merge. No
// merge produces them, so encoding never emits them; they only keep the
// id space exactly vocabSize wide (embedding rows for them are unused).
const trainFillerFormat = "<|reserved_%d|>"

// TrainByteLevelBPE trains a Qwen-style byte-level BPE tokenizer on corpus
// and returns its tokenizer.json: NFC normalizer, the Qwen3 split regex
// plus ByteLevel pre-tokenizer, ByteLevel decoder and post-processor, and
// TrainSpecialTokens as special added tokens.
//
// The vocabulary is exactly vocabSize ids: 256 byte tokens (id = byte
// value), then one token per merge in merge order, then filler entries if
// the corpus has no pairs left to merge, then the special tokens. Merges
// pick the most frequent adjacent pair, ties going to the smallest pair of
// ids (as in the reference's BpeTrainer); the output is byte-for-byte
// deterministic.
func TrainByteLevelBPE(corpus string, vocabSize int) ([]byte, error) {
	nSpecial := len(TrainSpecialTokens)
	if vocabSize < 256+nSpecial {
		return nil, fmt.Errorf("train: vocab size %d is below the minimum %d (256 bytes + %d special tokens)",
			vocabSize, 256+nSpecial, nSpecial)
	}
	words, err := trainWords(corpus)
	if err != nil {
		return nil, err
	}
	tokens := make([][]byte, 256, vocabSize)
	for b := range tokens {
		tokens[b] = []byte{byte(b)}
	}
	merges := runMerges(words, &tokens, vocabSize-nSpecial)
	return writeTrained(tokens, merges, vocabSize)
}

// trainWord is a distinct pre-token with its count and current symbols.
type trainWord struct {
	syms []int32
	freq int
}

// trainWords pre-tokenizes the corpus exactly as the trained tokenizer
// will (special tokens split out, NFC, Qwen3 regex) and counts the words.
func trainWords(corpus string) ([]trainWord, error) {
	shell, err := Parse(trainedJSON(nil, nil, len(TrainSpecialTokens)+256, false))
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	segs, err := extract(shell.added, shell.normalizer, validUTF8(corpus))
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	counts := map[string]int{}
	for _, seg := range segs {
		if seg.id >= 0 {
			continue
		}
		pieces, err := shell.pre.preTokenize([]piece{{s: seg.s, atStart: seg.atStart}})
		if err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
		for _, p := range pieces {
			counts[p.s]++ // raw bytes: the ByteLevel step defers its mapping
		}
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	words := make([]trainWord, len(keys))
	for i, k := range keys {
		syms := make([]int32, len(k))
		for j := 0; j < len(k); j++ {
			syms[j] = int32(k[j])
		}
		words[i] = trainWord{syms: syms, freq: counts[k]}
	}
	return words, nil
}

// pairEntry is a heap entry: a pair and its count when pushed.
type pairEntry struct {
	count int
	pair  uint64
}

// pairHeap pops the highest count first, then the smallest pair.
type pairHeap []pairEntry

func (h pairHeap) Len() int { return len(h) }
func (h pairHeap) Less(i, j int) bool {
	if h[i].count != h[j].count {
		return h[i].count > h[j].count
	}
	return h[i].pair < h[j].pair
}
func (h pairHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pairHeap) Push(x any)   { *h = append(*h, x.(pairEntry)) }
func (h *pairHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// trainer holds the pair statistics of a training run.
type trainer struct {
	words   []trainWord
	counts  map[uint64]int
	where   map[uint64][]int32 // word indices (may repeat or be stale)
	h       pairHeap
	changed map[uint64]bool
	stamp   []int // per word: last merge that visited it
}

func newTrainer(words []trainWord) *trainer {
	tr := &trainer{words: words, counts: map[uint64]int{}, where: map[uint64][]int32{},
		changed: map[uint64]bool{}, stamp: make([]int, len(words))}
	for w := range words {
		tr.addPairs(int32(w), +1)
	}
	for p, c := range tr.counts {
		tr.h = append(tr.h, pairEntry{c, p})
	}
	heap.Init(&tr.h)
	clear(tr.changed)
	return tr
}

// addPairs adds (sign +1) or removes (-1) the pairs of word w.
func (tr *trainer) addPairs(w int32, sign int) {
	word := &tr.words[w]
	for i := 0; i+1 < len(word.syms); i++ {
		p := pairKey(word.syms[i], word.syms[i+1])
		tr.counts[p] += sign * word.freq
		tr.changed[p] = true
		if sign > 0 {
			tr.where[p] = append(tr.where[p], w)
		}
	}
}

// best pops the most frequent live pair; ok is false when none is left.
func (tr *trainer) best() (pair uint64, ok bool) {
	for tr.h.Len() > 0 {
		e := heap.Pop(&tr.h).(pairEntry)
		if c := tr.counts[e.pair]; c == e.count && c > 0 {
			return e.pair, true
		}
	}
	return 0, false
}

// apply merges pair into id everywhere and updates the statistics.
func (tr *trainer) apply(pair uint64, id int32, step int) {
	a, b := int32(pair>>32), int32(uint32(pair))
	for _, w := range tr.where[pair] {
		if tr.stamp[w] == step {
			continue
		}
		tr.stamp[w] = step
		word := &tr.words[w]
		if !containsPair(word.syms, a, b) {
			continue
		}
		tr.addPairs(w, -1)
		out := word.syms[:0]
		for i := 0; i < len(word.syms); i++ {
			if i+1 < len(word.syms) && word.syms[i] == a && word.syms[i+1] == b {
				out = append(out, id)
				i++
				continue
			}
			out = append(out, word.syms[i])
		}
		word.syms = out
		tr.addPairs(w, +1)
	}
	delete(tr.where, pair)
	for p := range tr.changed {
		if c := tr.counts[p]; c > 0 {
			heap.Push(&tr.h, pairEntry{c, p})
		} else {
			delete(tr.counts, p)
		}
	}
	clear(tr.changed)
}

func containsPair(syms []int32, a, b int32) bool {
	for i := 0; i+1 < len(syms); i++ {
		if syms[i] == a && syms[i+1] == b {
			return true
		}
	}
	return false
}

// runMerges merges until the model vocabulary has target tokens or no
// pair is left. A merge whose result already exists reuses its id (as the
// reference's trainer does) and so does not grow the vocabulary.
func runMerges(words []trainWord, tokens *[][]byte, target int) [][2]int32 {
	tr := newTrainer(words)
	byBytes := map[string]int32{}
	for id, t := range *tokens {
		byBytes[string(t)] = int32(id)
	}
	var merges [][2]int32
	for step := 1; len(*tokens) < target; step++ {
		pair, ok := tr.best()
		if !ok {
			break
		}
		a, b := int32(pair>>32), int32(uint32(pair))
		merged := append(append([]byte(nil), (*tokens)[a]...), (*tokens)[b]...)
		id, exists := byBytes[string(merged)]
		if !exists {
			id = int32(len(*tokens))
			*tokens = append(*tokens, merged)
			byBytes[string(merged)] = id
		}
		merges = append(merges, [2]int32{a, b})
		tr.apply(pair, id, step)
	}
	return merges
}

// writeTrained renders the tokenizer.json of a trained model, padding the
// model vocabulary with fillers up to vocabSize minus the special tokens.
func writeTrained(tokens [][]byte, merges [][2]int32, vocabSize int) ([]byte, error) {
	target := vocabSize - len(TrainSpecialTokens)
	vocab := make([]string, len(tokens), target)
	seen := map[string]bool{}
	for i, t := range tokens {
		vocab[i] = byteLevelString(string(t))
		seen[vocab[i]] = true
	}
	for n := 0; len(vocab) < target; n++ {
		f := fmt.Sprintf(trainFillerFormat, n)
		if !seen[f] {
			vocab = append(vocab, f)
		}
	}
	pairs := make([][2]string, len(merges))
	for i, m := range merges {
		pairs[i] = [2]string{vocab[m[0]], vocab[m[1]]}
	}
	return trainedJSON(vocab, pairs, vocabSize, true), nil
}

// trainedJSON writes the tokenizer.json text. With model=false it writes a
// shell with an empty model (used to pre-tokenize the training corpus).
func trainedJSON(vocab []string, merges [][2]string, vocabSize int, model bool) []byte {
	var buf bytes.Buffer
	q := jsonString
	byteLevel := `{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}`
	buf.WriteString("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [")
	first := vocabSize - len(TrainSpecialTokens)
	if !model {
		first = 0
	}
	for i, s := range TrainSpecialTokens {
		if i > 0 {
			buf.WriteString(",")
		}
		fmt.Fprintf(&buf, "\n    {\"id\": %d, \"content\": %s, \"single_word\": false, \"lstrip\": false, "+
			"\"rstrip\": false, \"normalized\": false, \"special\": true}", first+i, q(s))
	}
	buf.WriteString("\n  ],\n  \"normalizer\": {\"type\": \"NFC\"},\n")
	fmt.Fprintf(&buf, "  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "+
		"\"pattern\": {\"Regex\": %s}, \"behavior\": \"Isolated\", \"invert\": false}, %s]},\n", q(qwenPattern), byteLevel)
	fmt.Fprintf(&buf, "  \"post_processor\": %s,\n  \"decoder\": %s,\n", byteLevel, byteLevel)
	buf.WriteString("  \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, " +
		"\"continuing_subword_prefix\": \"\", \"end_of_word_suffix\": \"\", \"fuse_unk\": false, " +
		"\"byte_fallback\": false, \"ignore_merges\": false,\n    \"vocab\": {")
	for id, tok := range vocab {
		if id > 0 {
			buf.WriteString(",")
		}
		buf.WriteString("\n      " + q(tok) + ": " + strconv.Itoa(id))
	}
	buf.WriteString("\n    },\n    \"merges\": [")
	for i, m := range merges {
		if i > 0 {
			buf.WriteString(",")
		}
		buf.WriteString("\n      [" + q(m[0]) + ", " + q(m[1]) + "]")
	}
	buf.WriteString("\n    ]\n  }\n}\n")
	return buf.Bytes()
}

// jsonString quotes s as JSON without HTML escaping (so "<|im_end|>"
// stays readable).
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return strconv.Quote(s) // unreachable: strings always encode
	}
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}
