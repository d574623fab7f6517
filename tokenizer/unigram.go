package tokenizer

import (
	"encoding/json"
	"fmt"
	"math"
	"unicode/utf8"
)

// unigram is the reference's Unigram model (SentencePiece's): a list of
// pieces with log-probability scores, and a Viterbi search for the
// segmentation with the highest total score. A character no piece starts
// with costs the lowest score minus 10 and becomes unk; consecutive unks
// are fused into one (the reference always fuses). With byte_fallback, a
// segment without a piece becomes its <0xNN> byte pieces when all exist.
type unigram struct {
	vocabTable
	scores       []float64 // by id
	unkID        int       // -1 when there is none
	byteFallback bool
	unkScore     float64
	maxLen       int // longest piece in bytes
}

// kUnkPenalty is the reference's K_UNK_PENALTY.
const kUnkPenalty = 10.0

func newUnigram(f modelFields, raw json.RawMessage) (*unigram, error) {
	var list [][2]json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("model Unigram: vocab: want [[token, score], ...]: %w", err)
	}
	if len(list) > MaxVocab {
		return nil, fmt.Errorf("model Unigram: vocab: %w", errVocabCap("pieces"))
	}
	vocab := make(map[string]int, len(list))
	m := &unigram{unkID: -1, byteFallback: f.ByteFallback, scores: make([]float64, len(list))}
	minScore := math.Inf(1)
	for i, e := range list {
		var tok string
		if err := json.Unmarshal(e[0], &tok); err != nil {
			return nil, fmt.Errorf("model Unigram: vocab[%d]: token: %w", i, err)
		}
		if err := json.Unmarshal(e[1], &m.scores[i]); err != nil {
			return nil, fmt.Errorf("model Unigram: vocab[%d] %q: score: %w", i, tok, err)
		}
		vocab[tok] = i // a repeated piece keeps its last id, as in the reference's map
		minScore = min(minScore, m.scores[i])
		m.maxLen = max(m.maxLen, len(tok))
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("model Unigram: empty vocab")
	}
	v, err := newVocabTable(vocab)
	if err != nil {
		return nil, err
	}
	m.vocabTable = v
	if f.UnkID != nil {
		if *f.UnkID < 0 || *f.UnkID >= len(list) {
			return nil, fmt.Errorf("model Unigram: unk_id %d is outside the vocab of %d pieces", *f.UnkID, len(list))
		}
		m.unkID = *f.UnkID
	}
	m.unkScore = minScore - kUnkPenalty
	return m, nil
}

// size counts pieces, repeated ones included, as the reference does.
func (m *unigram) size() int { return len(m.scores) }

type viterbiNode struct {
	score float64
	start int // -1: not reached
	id    int
}

// encodeWord is the reference's encode_optimized followed by tokenize.
func (m *unigram) encodeWord(s string, out []int, _ *scratch) ([]int, error) {
	if s == "" {
		return out, nil
	}
	best := make([]viterbiNode, len(s)+1)
	for i := range best {
		best[i].start = -1
	}
	best[0].start = 0
	for start := 0; start < len(s); {
		base := best[start].score
		_, mblen := utf8.DecodeRuneInString(s[start:])
		single := false
		// Pieces starting here, shortest first (the reference's trie order).
		for end := start + mblen; end <= len(s) && end-start <= m.maxLen; {
			if id, ok := m.vocab[s[start:end]]; ok {
				cand := base + m.scores[id]
				if t := &best[end]; t.start < 0 || cand > t.score {
					*t = viterbiNode{score: cand, start: start, id: id}
				}
				if end-start == mblen {
					single = true
				}
			}
			if end == len(s) {
				break
			}
			_, size := utf8.DecodeRuneInString(s[end:])
			end += size
		}
		if !single {
			if m.unkID < 0 {
				return out, fmt.Errorf("tokenizer: Unigram: %q has no piece and the model has no unk_id", s[start:start+mblen])
			}
			cand := base + m.unkScore
			if t := &best[start+mblen]; t.start < 0 || cand > t.score {
				*t = viterbiNode{score: cand, start: start, id: m.unkID}
			}
		}
		start += mblen
	}
	// Walk back; fuse runs of unk into one segment.
	var segs []string
	fused := ""
	for end := len(s); end > 0; {
		n := best[end]
		if n.id == m.unkID && m.unkID >= 0 {
			fused = s[n.start:end] + fused
		} else {
			if fused != "" {
				segs = append(segs, fused)
				fused = ""
			}
			segs = append(segs, s[n.start:end])
		}
		end = n.start
	}
	if fused != "" {
		segs = append(segs, fused)
	}
	for i := len(segs) - 1; i >= 0; i-- {
		var err error
		if out, err = m.segmentIDs(segs[i], out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// segmentIDs is the reference's tokenize step for one segment: its piece,
// else its byte pieces (byte_fallback), else unk.
func (m *unigram) segmentIDs(seg string, out []int) ([]int, error) {
	if id, ok := m.vocab[seg]; ok {
		return append(out, id), nil
	}
	if m.byteFallback {
		n := len(out)
		ok := true
		for i := 0; i < len(seg) && ok; i++ {
			var id int
			if id, ok = m.vocab[fmt.Sprintf("<0x%02X>", seg[i])]; ok {
				out = append(out, id)
			}
		}
		if ok {
			return out, nil
		}
		out = out[:n]
	}
	if m.unkID < 0 {
		return out, fmt.Errorf("tokenizer: Unigram: %q has no piece and the model has no unk_id", seg)
	}
	return append(out, m.unkID), nil
}

func (m *unigram) encodeRaw(raw string, out []int, sc *scratch) ([]int, error) {
	return m.encodeWord(byteLevelString(raw), out, sc)
}

func (m *unigram) unkIndex() int { return m.unkID }
