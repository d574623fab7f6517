package tokenizer

import (
	"unicode/utf8"
)

// wordPiece is the reference's WordPiece model: greedy longest-match-first
// over the pre-token, continuations carrying the subword prefix ("##");
// a pre-token with any unmatchable rest, or longer than
// max_input_chars_per_word characters, becomes the single unk token.
type wordPiece struct {
	vocabTable
	unk      string
	unkID    int
	prefix   string
	maxChars int
}

func newWordPiece(f modelFields, vocab map[string]int) (*wordPiece, error) {
	v, err := newVocabTable(vocab)
	if err != nil {
		return nil, err
	}
	m := &wordPiece{vocabTable: v, unk: "[UNK]", prefix: "##", maxChars: 100}
	if f.UnkToken != nil {
		m.unk = *f.UnkToken
	}
	if f.ContinuingSubwordPrefix != nil {
		m.prefix = *f.ContinuingSubwordPrefix
	}
	if f.MaxInputCharsPerWord != nil {
		m.maxChars = *f.MaxInputCharsPerWord
	}
	m.unkID = v.unkOf(m.unk)
	return m, nil
}

func (m *wordPiece) encodeWord(word string, out []int, _ *scratch) ([]int, error) {
	if utf8.RuneCountInString(word) > m.maxChars {
		return m.unknown(out)
	}
	start0 := len(out)
	var buf []byte
	for start := 0; start < len(word); {
		end, id := len(word), -1
		for start < end {
			sub := word[start:end]
			if start > 0 {
				buf = append(append(buf[:0], m.prefix...), sub...)
				sub = string(buf)
			}
			if got, ok := m.vocab[sub]; ok {
				id = got
				break
			}
			_, size := utf8.DecodeLastRuneInString(word[start:end])
			end -= size
		}
		if id < 0 {
			return m.unknown(out[:start0])
		}
		out = append(out, id)
		start = end
	}
	return out, nil
}

func (m *wordPiece) unknown(out []int) ([]int, error) {
	if m.unkID < 0 {
		return out, missingUnk("WordPiece", m.unk)
	}
	return append(out, m.unkID), nil
}

func (m *wordPiece) encodeRaw(raw string, out []int, sc *scratch) ([]int, error) {
	return m.encodeWord(byteLevelString(raw), out, sc)
}

func (m *wordPiece) unkIndex() int { return m.unkID }
