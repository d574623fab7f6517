package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
)

// model turns one pre-token into ids: BPE, WordPiece, WordLevel or Unigram,
// as tokenizer.json's "model.type" says.
type model interface {
	// encodeWord appends the ids of a pre-token.
	encodeWord(word string, out []int, sc *scratch) ([]int, error)
	// encodeRaw appends the ids of a byte-level pre-token given as its raw
	// bytes (the text is byteLevelString(raw)).
	encodeRaw(raw string, out []int, sc *scratch) ([]int, error)
	tokenToID(tok string) (int, bool)
	idToToken(id int) (string, bool)
	// size is the reference's get_vocab_size: the number of vocab entries.
	size() int
	// idLimit is one more than the largest vocab id.
	idLimit() int
	// unkIndex is the unknown token's id, -1 when the model has none.
	unkIndex() int
}

// modelFields are the small fields of every model type.
type modelFields struct {
	Type                    string  `json:"type"`
	UnkToken                *string `json:"unk_token"`
	ContinuingSubwordPrefix *string `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string `json:"end_of_word_suffix"`
	FuseUnk                 bool    `json:"fuse_unk"`
	ByteFallback            bool    `json:"byte_fallback"`
	IgnoreMerges            bool    `json:"ignore_merges"`
	MaxInputCharsPerWord    *int    `json:"max_input_chars_per_word"`
	UnkID                   *int    `json:"unk_id"`
}

// parseModel reads the "model" object with the scanner: a token -> id vocab
// object and the merges by hand, a Unigram's [token, score] list and the
// remaining small fields through encoding/json.
func parseModel(sc *scanner) (model, error) {
	var vocab map[string]int
	var merges [][2]string
	var pieces json.RawMessage
	var rest []string
	err := sc.object(func(key string) error {
		var err error
		switch {
		case key == "vocab" && sc.peek() == '[':
			var raw string
			raw, err = sc.skipValue()
			pieces = json.RawMessage(raw)
		case key == "vocab":
			vocab, err = sc.vocab()
		case key == "merges":
			merges, err = sc.merges()
		default:
			var raw string
			if raw, err = sc.skipValue(); err == nil {
				k, _ := json.Marshal(key)
				rest = append(rest, string(k)+":"+raw)
			}
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	var f modelFields
	if err := json.Unmarshal([]byte("{"+strings.Join(rest, ",")+"}"), &f); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	typ := f.Type
	if typ == "" { // untagged, as the reference accepts: guess from the fields
		switch {
		case merges != nil:
			typ = "BPE"
		case pieces != nil:
			typ = "Unigram"
		case f.MaxInputCharsPerWord != nil:
			typ = "WordPiece"
		default:
			typ = "WordLevel"
		}
	}
	if typ != "Unigram" && pieces != nil {
		return nil, fmt.Errorf("model %s: vocab must be an object of token -> id", typ)
	}
	switch typ {
	case "BPE":
		return newBPE(f, vocab, merges)
	case "WordPiece":
		return newWordPiece(f, vocab)
	case "WordLevel":
		return newWordLevel(f, vocab)
	case "Unigram":
		return newUnigram(f, pieces)
	}
	return nil, fmt.Errorf("model: unsupported type %q (BPE, WordPiece, WordLevel, Unigram)", typ)
}

// vocabTable is a token -> id map with its dense reverse table; WordPiece
// and WordLevel are nothing more, BPE adds merges.
type vocabTable struct {
	vocab  map[string]int
	vocabR []string // id -> token
	hasID  []bool   // whether vocabR[id] is a token
}

// newVocabTable fills the reverse table. Ids must be dense enough for a
// table: a vocab whose largest id is far beyond its size is rejected.
func newVocabTable(vocab map[string]int) (vocabTable, error) {
	if vocab == nil {
		return vocabTable{}, fmt.Errorf("model: missing vocab")
	}
	maxID := -1
	for _, id := range vocab {
		maxID = max(maxID, id)
	}
	if maxID >= 2*len(vocab)+1<<16 {
		return vocabTable{}, fmt.Errorf("model: vocab of %d tokens has id %d: ids too sparse", len(vocab), maxID)
	}
	v := vocabTable{vocab: vocab, vocabR: make([]string, maxID+1), hasID: make([]bool, maxID+1)}
	for tok, id := range vocab {
		v.vocabR[id] = tok
		v.hasID[id] = true
	}
	return v, nil
}

func (v *vocabTable) tokenToID(tok string) (int, bool) {
	id, ok := v.vocab[tok]
	return id, ok
}

func (v *vocabTable) idToToken(id int) (string, bool) {
	if id < 0 || id >= len(v.vocabR) || !v.hasID[id] {
		return "", false
	}
	return v.vocabR[id], true
}

func (v *vocabTable) size() int    { return len(v.vocab) }
func (v *vocabTable) idLimit() int { return len(v.vocabR) }

// unkOf looks up a model's unk token: the id, or an error naming it when
// the vocab lacks it (the reference fails only when an unknown word needs
// it; so does the caller, through missingUnk).
func (v *vocabTable) unkOf(unk string) int {
	if id, ok := v.vocab[unk]; ok {
		return id
	}
	return -1
}

func missingUnk(kind, unk string) error {
	return fmt.Errorf("tokenizer: %s: a word is not in the vocab and the unk token %q is missing from it", kind, unk)
}
