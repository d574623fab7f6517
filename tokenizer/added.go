package tokenizer

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's "added_tokens".
type addedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

func (t addedToken) normalized() bool { return boolOr(t.Normalized, true) }

func (t addedToken) same(u addedToken) bool {
	return t.Content == u.Content && t.SingleWord == u.SingleWord && t.LStrip == u.LStrip &&
		t.RStrip == u.RStrip && t.normalized() == u.normalized() && t.Special == u.Special
}

// addedVocab holds the added tokens and the two matchers the reference
// splits the input with: one on the raw text for tokens with
// normalized=false, one on the normalized text for the others.
type addedVocab struct {
	byContent map[string]int
	byID      map[int]addedToken
	special   map[string]bool
	raw       *addedMatcher
	norm      *addedMatcher
}

// buildAddedVocab registers tokens one by one the way the reference's
// deserializer does (ids of tokens already in the model vocab are kept,
// new ones get the next free id past the model), then builds matchers.
func buildAddedVocab(tokens []addedToken, model model, n normalizer) (*addedVocab, error) {
	av := &addedVocab{byContent: map[string]int{}, byID: map[int]addedToken{}, special: map[string]bool{}}
	var specialList, classic []addedToken
	modelSize := model.size()
	for _, tok := range tokens {
		if tok.Special && tok.Content != "" && !av.special[tok.Content] {
			specialList = append(specialList, tok)
			av.special[tok.Content] = true
		}
		if tok.Content == "" || av.hasSame(tok) {
			continue
		}
		id, ok := av.tokenToID(tok.Content, model)
		if !ok {
			id = av.nextID(modelSize)
		}
		av.byContent[tok.Content] = id
		av.byID[id] = tok
		if !av.special[tok.Content] {
			classic = append(classic, tok)
		}
	}
	var rawPats, normPats []string
	var rawToks, normToks []addedToken
	var rawIDs, normIDs []int
	for _, tok := range append(specialList, classic...) {
		id, _ := av.tokenToID(tok.Content, model)
		if !tok.normalized() {
			rawPats, rawToks, rawIDs = append(rawPats, tok.Content), append(rawToks, tok), append(rawIDs, id)
			continue
		}
		pat := tok.Content
		if n != nil {
			var err error
			if pat, err = n.normalize(pat); err != nil {
				return nil, err
			}
		}
		normPats, normToks, normIDs = append(normPats, pat), append(normToks, tok), append(normIDs, id)
	}
	av.raw = newAddedMatcher(rawPats, rawToks, rawIDs)
	av.norm = newAddedMatcher(normPats, normToks, normIDs)
	return av, nil
}

// hasSame reports whether an identical token is registered (the
// reference scans all of them; tokens are registered under the id of
// their content, so looking there is enough).
func (av *addedVocab) hasSame(tok addedToken) bool {
	id, ok := av.byContent[tok.Content]
	if !ok {
		return false
	}
	t, ok := av.byID[id]
	return ok && t.same(tok)
}

func (av *addedVocab) tokenToID(content string, model model) (int, bool) {
	if id, ok := av.byContent[content]; ok {
		return id, true
	}
	return model.tokenToID(content)
}

func (av *addedVocab) nextID(modelSize int) int {
	if len(av.byContent) == 0 {
		return modelSize
	}
	maxID := -1
	for _, id := range av.byContent {
		maxID = max(maxID, id)
	}
	if maxID >= modelSize || modelSize == 0 {
		return maxID + 1
	}
	return modelSize
}

// addedMatcher finds added tokens leftmost-longest, like the reference's
// Aho-Corasick automaton with MatchKind::LeftmostLongest.
type addedMatcher struct {
	pats    []string
	toks    []addedToken
	ids     []int
	byFirst [256][]int32 // pattern indices by first byte, longest first
}

func newAddedMatcher(pats []string, toks []addedToken, ids []int) *addedMatcher {
	m := &addedMatcher{pats: pats, toks: toks, ids: ids}
	for i, p := range pats {
		if p != "" {
			m.byFirst[p[0]] = append(m.byFirst[p[0]], int32(i))
		}
	}
	for b := range m.byFirst {
		c := m.byFirst[b]
		sort.SliceStable(c, func(x, y int) bool { return len(pats[c[x]]) > len(pats[c[y]]) })
	}
	return m
}

// next finds the leftmost-longest match at or after from.
func (m *addedMatcher) next(s string, from int) (start, end, pat int, ok bool) {
	for i := from; i < len(s); i++ {
		for _, p := range m.byFirst[s[i]] {
			if strings.HasPrefix(s[i:], m.pats[p]) {
				return i, i + len(m.pats[p]), int(p), true
			}
		}
	}
	return 0, 0, 0, false
}

// segment is a stretch of text, or an added token (id >= 0).
type segment struct {
	s       string
	atStart bool // begins at offset 0 of the string that was split
	id      int
}

// split cuts s around added tokens, honoring single_word, lstrip and
// rstrip exactly like the reference's AddedVocabulary::find_matches.
// Empty text segments are dropped.
func (m *addedMatcher) split(s string, out []segment) []segment {
	if len(m.pats) == 0 {
		if s != "" {
			out = append(out, segment{s, true, -1})
		}
		return out
	}
	startOffset := 0
	for pos := 0; ; {
		start, end, p, ok := m.next(s, pos)
		if !ok {
			break
		}
		pos = end
		tok := m.toks[p]
		stop := end
		if tok.SingleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if tok.LStrip {
			start = max(trailingSpaceStart(s[:start]), startOffset)
		}
		if tok.RStrip {
			stop += leadingSpaceLen(s[stop:])
		}
		if startOffset < start {
			out = append(out, segment{s[startOffset:start], startOffset == 0, -1})
		}
		if start < stop && start >= 0 && stop <= len(s) {
			out = append(out, segment{s[start:stop], start == 0, m.ids[p]})
		}
		startOffset = stop
	}
	if startOffset < len(s) {
		out = append(out, segment{s[startOffset:], startOffset == 0, -1})
	}
	return out
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && isWordChar(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && isWordChar(r)
}

// trailingSpaceStart is where the run of whitespace that ends s begins.
func trailingSpaceStart(s string) int {
	return len(strings.TrimRightFunc(s, unicode.IsSpace))
}

// leadingSpaceLen is the byte length of the whitespace that starts s.
func leadingSpaceLen(s string) int {
	return len(s) - len(strings.TrimLeftFunc(s, unicode.IsSpace))
}
