package tokenizer

// wordLevel maps each pre-token to its vocab id as a whole, or to the unk
// token (the reference's WordLevel model).
type wordLevel struct {
	vocabTable
	unk   string
	unkID int // -1 when unk is not in the vocab
}

func newWordLevel(f modelFields, vocab map[string]int) (*wordLevel, error) {
	v, err := newVocabTable(vocab)
	if err != nil {
		return nil, err
	}
	m := &wordLevel{vocabTable: v, unk: "<unk>"}
	if f.UnkToken != nil {
		m.unk = *f.UnkToken
	}
	m.unkID = v.unkOf(m.unk)
	return m, nil
}

func (m *wordLevel) encodeWord(word string, out []int, _ *scratch) ([]int, error) {
	if id, ok := m.vocab[word]; ok {
		return append(out, id), nil
	}
	if m.unkID < 0 {
		return out, missingUnk("WordLevel", m.unk)
	}
	return append(out, m.unkID), nil
}

func (m *wordLevel) encodeRaw(raw string, out []int, sc *scratch) ([]int, error) {
	return m.encodeWord(byteLevelString(raw), out, sc)
}

func (m *wordLevel) unkIndex() int { return m.unkID }
