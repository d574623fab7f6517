// Package tokenizer owns text <-> token-id conversion for sparkconv: it
// loads a Hugging Face tokenizer.json of any model type (BPE, WordPiece,
// WordLevel, Unigram) and encodes and decodes exactly as the reference Rust
// `tokenizers` library (0.23) does, and it trains small byte-level BPE
// tokenizers for the project's own fixtures.
//
// The encode pipeline mirrors the reference step by step: added tokens with
// normalized=false are split out of the raw text first, each remaining
// stretch is normalized, added tokens with normalized=true are split out of
// the normalized text, the rest is pre-tokenized and each pre-token goes
// through the model; with add_special_tokens the post-processor adds
// its special tokens. Offsets are not tracked (only ids are produced).
//
// Supported components: models BPE (string or pair merges, ignore_merges,
// byte_fallback, unk_token, fuse_unk, continuing_subword_prefix,
// end_of_word_suffix; dropout is ignored, so encoding is deterministic),
// WordPiece (greedy longest match, continuing_subword_prefix,
// max_input_chars_per_word), WordLevel, Unigram (Viterbi over piece
// scores, fused unks, byte_fallback); normalizers NFC, NFD, NFKC, NFKD,
// Lowercase, Strip, StripAccents, Replace, Prepend, Append, ByteLevel,
// BertNormalizer, Nmt, Sequence; pre-tokenizers Split, ByteLevel,
// Metaspace, Digits, Whitespace, WhitespaceSplit, Punctuation,
// BertPreTokenizer, CharDelimiterSplit, UnicodeScripts, Sequence;
// post-processors TemplateProcessing (single sequence), Bert/
// RobertaProcessing, ByteLevel, Sequence; decoders ByteLevel,
// ByteFallback, Fuse, Strip, Replace, Metaspace, BPEDecoder, WordPiece,
// Sequence. Anything else (notably the Precompiled normalizer of
// SentencePiece conversions, FixedLength, CTC) is a load error. Truncation
// and padding settings are ignored. testdata/tokenizers/trained holds a
// tokenizer of each model type trained with the reference library, with
// its ids for the public texts.
//
// Split regexes: the reference runs them through Oniguruma. The GPT-2,
// Qwen2/3, Llama-3 and DeepSeek-V3 patterns are recognized and run by
// exact hand-written matchers (fast.go; fast_test.go checks them against
// regexp2 on random text); any other pattern runs through
// github.com/dlclark/regexp2, whose default mode has the same \s, \p{L}
// and \p{N} classes. Known gaps: Unicode tables are Go's (15.0); under
// (?i) Oniguruma folds U+017F to "s", which the hand-written matchers do
// and regexp2 does not. Unicode normalization avoids x/text's stream-safe
// U+034F insertion, so long combining-mark runs normalize like the
// reference's (unicode.go).
package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unsafe"

	"sparkconv/infile"
)

// Tokenizer is a loaded tokenizer.json. It is safe for concurrent use.
type Tokenizer struct {
	model      model
	added      *addedVocab
	normalizer normalizer
	pre        preTokenizer
	post       postProcessor
	decoder    decoder
	vocabSize  int
}

// UnkID is the id of the model's unknown token, -1 when it has none (the
// share of it in calibration text is a check, calib.CheckVariety).
func (t *Tokenizer) UnkID() int { return t.model.unkIndex() }

// Load reads and parses a tokenizer.json file.
func Load(path string) (*Tokenizer, error) {
	if err := sniffObject(path); err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	data, err := infile.ReadFile(path, infile.TokenizerMax) // a regular file, size capped
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	// The buffer is ours and never written again, so the vocabulary strings
	// may point into it instead of into a copy.
	t, err := parse(unsafe.String(unsafe.SliceData(data), len(data)))
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	return t, nil
}

// sniffObject refuses a file that does not begin (after white space and a
// UTF-8 BOM) with a JSON object, before the whole file is read: a large
// file of garbage costs one small read, not its size in memory.
func sniffObject(path string) error {
	f, _, err := infile.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	head := make([]byte, 4096)
	n, _ := io.ReadFull(f, head)
	rest := bytes.TrimLeft(bytes.TrimPrefix(head[:n], []byte("\xef\xbb\xbf")), " \t\r\n")
	if len(rest) > 0 && rest[0] != '{' {
		return fmt.Errorf("json at byte %d: want an object", n-len(rest))
	}
	return nil
}

// Parse builds a Tokenizer from the contents of a tokenizer.json file.
func Parse(data []byte) (*Tokenizer, error) {
	t, err := parse(string(data))
	if err != nil {
		return nil, fmt.Errorf("parse tokenizer.json: %w", err)
	}
	return t, nil
}

func parse(data string) (*Tokenizer, error) {
	sc := &scanner{data: data}
	t := &Tokenizer{}
	raw := map[string]string{}
	err := sc.object(func(key string) error {
		if key == "model" {
			var err error
			t.model, err = parseModel(sc)
			return err
		}
		v, err := sc.skipValue()
		raw[key] = v
		return err
	})
	if err != nil {
		return nil, err
	}
	if sc.skipWS(); sc.pos != len(sc.data) {
		return nil, sc.errorf("trailing data after the top-level object")
	}
	if t.model == nil {
		return nil, fmt.Errorf("no model")
	}
	if err := t.parseParts(raw); err != nil {
		return nil, err
	}
	t.vocabSize = t.computeVocabSize()
	return t, nil
}

// parseParts builds everything but the model from the raw top-level values.
func (t *Tokenizer) parseParts(raw map[string]string) error {
	if v, ok := raw["version"]; ok {
		var version string
		if err := json.Unmarshal([]byte(v), &version); err != nil || version != "1.0" {
			return fmt.Errorf("unknown tokenizer.json version %s", v)
		}
	}
	var err error
	if t.normalizer, err = parseNormalizer(json.RawMessage(raw["normalizer"])); err != nil {
		return err
	}
	if t.pre, err = parsePreTokenizer(json.RawMessage(raw["pre_tokenizer"])); err != nil {
		return err
	}
	if t.post, err = parsePostProcessor(json.RawMessage(raw["post_processor"])); err != nil {
		return err
	}
	if t.decoder, err = parseDecoder(json.RawMessage(raw["decoder"])); err != nil {
		return err
	}
	var added []addedToken
	if v := raw["added_tokens"]; !isNull(json.RawMessage(v)) {
		if err := json.Unmarshal([]byte(v), &added); err != nil {
			return fmt.Errorf("added_tokens: %w", err)
		}
	}
	if t.added, err = buildAddedVocab(added, t.model, t.normalizer); err != nil {
		return fmt.Errorf("added_tokens: %w", err)
	}
	return nil
}

func (t *Tokenizer) computeVocabSize() int {
	n := t.model.idLimit()
	for id := range t.added.byID {
		n = max(n, id+1)
	}
	return n
}

// Encode returns the token ids of text. Added tokens that occur literally
// in text always become their own ids; addSpecial applies the
// post-processor (e.g. Llama-2's leading <s>). Invalid UTF-8 is first
// replaced with U+FFFD. The only possible error is a regex match timeout.
func (t *Tokenizer) Encode(text string, addSpecial bool) ([]int, error) {
	text = validUTF8(text)
	segs, err := extract(t.added, t.normalizer, text)
	if err != nil {
		return nil, err
	}
	ids := make([]int, 0, len(text)/3+4)
	sc := &scratch{}
	for _, seg := range segs {
		if seg.id >= 0 {
			ids = append(ids, seg.id)
			continue
		}
		if ids, err = t.encodeText(seg.s, seg.atStart, ids, sc); err != nil {
			return nil, err
		}
	}
	if addSpecial && t.post != nil {
		ids = t.post.process(ids)
	}
	return ids, nil
}

// extract is the reference's AddedVocabulary::extract_and_normalize: added
// tokens with normalized=false are split out of the raw text, each stretch
// between them is normalized, then added tokens with normalized=true are
// split out of the normalized stretches. Text segments come back
// normalized; empty ones are dropped.
func extract(av *addedVocab, n normalizer, text string) ([]segment, error) {
	outer := av.raw.split(text, nil)
	out := make([]segment, 0, len(outer))
	for _, seg := range outer {
		if seg.id >= 0 {
			out = append(out, seg)
			continue
		}
		s := seg.s
		if n != nil {
			var err error
			if s, err = n.normalize(s); err != nil {
				return nil, fmt.Errorf("tokenizer: normalize: %w", err)
			}
		}
		for _, sub := range av.norm.split(s, nil) {
			sub.atStart = sub.atStart && seg.atStart
			out = append(out, sub)
		}
	}
	return out, nil
}

// encodeText pre-tokenizes normalized text and runs the model on each
// pre-token.
func (t *Tokenizer) encodeText(s string, atStart bool, ids []int, sc *scratch) ([]int, error) {
	pieces := []piece{{s: s, atStart: atStart}}
	if t.pre != nil {
		var err error
		if pieces, err = t.pre.preTokenize(pieces); err != nil {
			return nil, fmt.Errorf("tokenizer: pre-tokenize: %w", err)
		}
	}
	for _, p := range pieces {
		var err error
		if p.raw {
			ids, err = t.model.encodeRaw(p.s, ids, sc)
		} else {
			ids, err = t.model.encodeWord(p.s, ids, sc)
		}
		if err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// Decode turns ids back into text. Unknown ids are skipped; skipSpecial
// also drops special added tokens.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	tokens := make([]string, 0, len(ids))
	for _, id := range ids {
		tok, ok := t.IDToToken(id)
		if !ok || (skipSpecial && t.added.special[tok]) {
			continue
		}
		tokens = append(tokens, tok)
	}
	if t.decoder == nil {
		return strings.Join(tokens, " ")
	}
	return strings.Join(t.decoder.decodeChain(tokens), "")
}

// VocabSize is one more than the largest id the tokenizer can produce or
// decode (model vocabulary and added tokens together).
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// TokenToID returns the id of a vocabulary or added-token string.
func (t *Tokenizer) TokenToID(token string) (int, bool) {
	return t.added.tokenToID(token, t.model)
}

// IDToToken returns the vocabulary or added-token string of an id.
func (t *Tokenizer) IDToToken(id int) (string, bool) {
	if tok, ok := t.added.byID[id]; ok {
		return tok.Content, true
	}
	return t.model.idToToken(id)
}
