package eval

import (
	"fmt"
	"strconv"
	"strings"

	"sparkconv/calib"
	"sparkconv/tokenizer"
)

// Text is the evaluation input: the token stream the windows are cut from,
// and the greedy test's prompts.
type Text struct {
	Source  string  // file name, or corpus.HeldOutName
	Stream  []int   // every token, windows are cut from it
	Prompts [][]int // one per sample: its first tokens
	Spans   []Span  // each sample's positions in Stream
}

// TextFromSamples tokenizes samples (a --samples file's contents; name
// for messages) with tok: the stream is the samples joined by a blank line
// and encoded once with the tokenizer's special tokens (as llama.cpp
// tokenizes its file); each sample's own first promptLen tokens are a
// greedy prompt.
func TextFromSamples(data []byte, name string, jsonl bool, tok *tokenizer.Tokenizer, promptLen int) (*Text, error) {
	samples, err := calib.ParseSamples(data, name, jsonl)
	if err != nil {
		return nil, err
	}
	parts := make([]string, len(samples))
	counts, heads := make([]int, len(samples)), make([]string, len(samples))
	t := &Text{Source: name}
	special, err := tok.Encode("", true) // what Encode adds once per text (BOS)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	for i, s := range samples {
		parts[i] = s.Text
		ids, err := tok.Encode(s.Text, true)
		if err != nil {
			return nil, fmt.Errorf("%s: sample %d: %w", name, s.Index, err)
		}
		if len(ids) > promptLen {
			t.Prompts = append(t.Prompts, ids[:promptLen])
		}
		counts[i], heads[i] = len(ids)-len(special), sampleHead(s.Text)
	}
	const sep = "\n\n"
	if t.Stream, err = tok.Encode(strings.Join(parts, sep), true); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	sepIDs, err := tok.Encode(sep, false)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(counts) > 0 {
		counts[0] += len(special)
	}
	t.Spans = spans(counts, heads, len(sepIDs), len(t.Stream))
	return t, nil
}

// ParseIDs reads whitespace-separated token ids (an --ids file), taken as
// they are: no BOS is added. The greedy prompts are consecutive runs of
// promptLen ids.
func ParseIDs(data []byte, name string, vocab, promptLen int) (*Text, error) {
	t := &Text{Source: name}
	for i, f := range strings.Fields(string(data)) {
		id, err := strconv.Atoi(f)
		if err != nil || id < 0 || id >= vocab {
			return nil, fmt.Errorf("%s: item %d %q is not a token id in 0..%d", name, i+1, f, vocab-1)
		}
		t.Stream = append(t.Stream, id)
	}
	for p := 0; p+promptLen <= len(t.Stream) && promptLen > 0; p += 4 * promptLen {
		t.Prompts = append(t.Prompts, t.Stream[p:p+promptLen])
	}
	return t, nil
}

// Windows is how many whole windows of ctx tokens the stream holds (a
// last partial window is dropped).
func (t *Text) Windows(ctx int) int { return len(t.Stream) / ctx }

// Window returns window w's tokens.
func (t *Text) Window(w, ctx int) []int { return t.Stream[w*ctx : (w+1)*ctx] }

// Scored is the range of scored positions of a window of ctx tokens:
// ctx/2 .. ctx-2, each scored against the next token.
func Scored(ctx int) (first, count int) { return ctx / 2, ctx - 1 - ctx/2 }
