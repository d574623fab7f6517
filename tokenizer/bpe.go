package tokenizer

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpe is the BPE model: a vocabulary, ranked merges, and the options that
// decide what happens to characters outside the vocabulary.
type bpe struct {
	vocabTable
	merges *mergeTable

	unkID        int // -1 when there is no unk token
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	prefix       *string // continuing_subword_prefix
	suffix       *string // end_of_word_suffix
	byteIDs      [256]int

	// Byte-level fast path: when every byte's alphabet character is in the
	// vocab and there is no prefix/suffix, words produced by the ByteLevel
	// pre-tokenizer are merged straight from their raw bytes (the alphabet
	// maps bytes one to one to characters, so the result is identical).
	bytePath bool
	byteSym  [256]int32

	cacheMu  sync.RWMutex
	cache    map[string][]int // by word
	rawCache map[string][]int // by raw bytes of a byte-level word
}

// cacheCap and cacheMaxLen bound the pre-token cache like the reference's
// (10,000 entries, words under 256 bytes).
const (
	cacheCap    = 10000
	cacheMaxLen = 256
)

func newBPE(opt modelFields, vocab map[string]int, merges [][2]string) (*bpe, error) {
	if merges == nil {
		return nil, fmt.Errorf("model: missing merges")
	}
	v, err := newVocabTable(vocab)
	if err != nil {
		return nil, err
	}
	m := &bpe{
		vocabTable:   v,
		merges:       newMergeTable(len(merges)),
		unkID:        -1,
		fuseUnk:      opt.FuseUnk,
		byteFallback: opt.ByteFallback,
		ignoreMerges: opt.IgnoreMerges,
		prefix:       nonEmpty(opt.ContinuingSubwordPrefix),
		suffix:       nonEmpty(opt.EndOfWordSuffix),
		cache:        make(map[string][]int),
		rawCache:     make(map[string][]int),
	}
	if opt.UnkToken != nil {
		id, ok := vocab[*opt.UnkToken]
		if !ok {
			return nil, fmt.Errorf("model: unk_token %q is not in the vocab", *opt.UnkToken)
		}
		m.unkID = id
	}
	for b := range m.byteIDs {
		id, ok := vocab[fmt.Sprintf("<0x%02X>", b)]
		if !ok {
			id = -1
		}
		m.byteIDs[b] = id
	}
	if err := m.buildMerges(merges); err != nil {
		return nil, err
	}
	m.setupBytePath()
	return m, nil
}

// nonEmpty maps an empty affix to none: adding "" changes nothing.
func nonEmpty(p *string) *string {
	if p == nil || *p == "" {
		return nil
	}
	return p
}

// setupBytePath enables merging byte-level words from raw bytes when the
// vocab covers the whole byte alphabet.
func (m *bpe) setupBytePath() {
	if m.prefix != nil || m.suffix != nil {
		return
	}
	for b := range m.byteSym {
		id, ok := m.vocab[byteCharStr[b]]
		if !ok {
			return
		}
		m.byteSym[b] = int32(id)
	}
	m.bytePath = true
}

func (m *bpe) buildMerges(merges [][2]string) error {
	var buf []byte
	prefixLen := 0
	if m.prefix != nil {
		prefixLen = len(*m.prefix)
	}
	for i, mg := range merges {
		a, b := mg[0], mg[1]
		aID, ok := m.vocab[a]
		if !ok {
			return fmt.Errorf("model: merge %d (%q %q): %q is not in the vocab", i, a, b, a)
		}
		bID, ok := m.vocab[b]
		if !ok {
			return fmt.Errorf("model: merge %d (%q %q): %q is not in the vocab", i, a, b, b)
		}
		if prefixLen > len(b) {
			return fmt.Errorf("model: merge %d (%q %q): shorter than the subword prefix", i, a, b)
		}
		buf = append(append(buf[:0], a...), b[prefixLen:]...)
		newID, ok := m.vocab[string(buf)]
		if !ok {
			return fmt.Errorf("model: merge %d (%q %q): %q is not in the vocab", i, a, b, buf)
		}
		// Later duplicates win, as when the reference collects into a map.
		m.merges.put(pairKey(int32(aID), int32(bID)), mergeVal{rank: int32(i), newID: int32(newID)})
	}
	return nil
}

func (m *bpe) encodeWord(word string, out []int, sc *scratch) ([]int, error) {
	return m.tokenize(word, out, sc), nil
}

func (m *bpe) encodeRaw(raw string, out []int, sc *scratch) ([]int, error) {
	return m.tokenizeBytes(raw, out, sc), nil
}

// tokenize appends the ids of one pre-token to out.
func (m *bpe) tokenize(word string, out []int, sc *scratch) []int {
	if word == "" {
		return out
	}
	return m.cached(m.cache, word, out, func(out []int) []int {
		if m.ignoreMerges {
			if id, ok := m.vocab[word]; ok {
				return append(out, id)
			}
		}
		m.initialSymbols(word, sc)
		return m.merge(out, sc)
	})
}

// tokenizeBytes appends the ids of a byte-level word given as raw bytes:
// the same result as tokenize(byteLevelString(raw)).
func (m *bpe) tokenizeBytes(raw string, out []int, sc *scratch) []int {
	if !m.bytePath {
		return m.tokenize(byteLevelString(raw), out, sc)
	}
	if raw == "" {
		return out
	}
	return m.cached(m.rawCache, raw, out, func(out []int) []int {
		if m.ignoreMerges {
			if id, ok := m.vocab[byteLevelString(raw)]; ok {
				return append(out, id)
			}
		}
		sc.syms = slices.Grow(sc.syms[:0], len(raw))
		for i := 0; i < len(raw); i++ {
			sc.addSymbol(m.byteSym[raw[i]])
		}
		return m.merge(out, sc)
	})
}

// merge runs the merges over sc.syms and appends the resulting ids.
func (m *bpe) merge(out []int, sc *scratch) []int {
	m.merges.mergeAll(sc)
	for _, s := range sc.syms {
		if !s.removed {
			out = append(out, int(s.id))
		}
	}
	return out
}

// cached appends the ids of key, from the cache or computed by compute.
// Like the reference it caches words under cacheMaxLen bytes, at most
// cacheCap of them; the cache never changes results.
func (m *bpe) cached(cache map[string][]int, key string, out []int, compute func([]int) []int) []int {
	short := len(key) < cacheMaxLen
	if short {
		m.cacheMu.RLock()
		ids, ok := cache[key]
		m.cacheMu.RUnlock()
		if ok {
			return append(out, ids...)
		}
	}
	start := len(out)
	out = compute(out)
	if short {
		m.cacheMu.Lock()
		if len(cache) < cacheCap {
			cache[strings.Clone(key)] = slices.Clone(out[start:])
		}
		m.cacheMu.Unlock()
	}
	return out
}

// initialSymbols fills sc.syms with the word's characters, mirroring the
// reference's merge_word loop: a character not in the vocab becomes its
// <0xNN> byte tokens (byte_fallback), else unk (fused with a preceding unk
// when fuse_unk), else is dropped.
func (m *bpe) initialSymbols(word string, sc *scratch) {
	sc.syms = slices.Grow(sc.syms[:0], len(word))
	unkPending := false
	for i := 0; i < len(word); {
		_, size := utf8.DecodeRuneInString(word[i:])
		s := word[i : i+size]
		isFirst, isLast := i == 0, i+size == len(word)
		i += size
		if !isFirst && m.prefix != nil {
			s = *m.prefix + s
		}
		if isLast && m.suffix != nil {
			s += *m.suffix
		}
		if id, ok := m.vocab[s]; ok {
			if unkPending {
				sc.addSymbol(int32(m.unkID))
				unkPending = false
			}
			sc.addSymbol(int32(id))
			continue
		}
		if m.byteFallback && m.allBytesKnown(s) {
			for j := 0; j < len(s); j++ {
				sc.addSymbol(int32(m.byteIDs[s[j]]))
			}
			continue
		}
		if m.unkID >= 0 {
			if unkPending && !m.fuseUnk {
				sc.addSymbol(int32(m.unkID))
			}
			unkPending = true
		}
	}
	if unkPending {
		sc.addSymbol(int32(m.unkID))
	}
}

func (m *bpe) allBytesKnown(s string) bool {
	for j := 0; j < len(s); j++ {
		if m.byteIDs[s[j]] < 0 {
			return false
		}
	}
	return true
}

func (m *bpe) unkIndex() int { return m.unkID }
