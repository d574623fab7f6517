package eval

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"sparkconv/calib"
	"sparkconv/tokenizer"
)

// MaxTokens caps the text eval scores: 2097152 tokens, 4096 windows of
// --ctx 512, more than six times wikitext-2's test text (655 windows of 512
// with the Llama-2 tokenizer), which llama-perplexity's KLD runs use. A
// longer text is refused while it is read, so eval's memory is bounded by
// its work, never by the file.
const MaxTokens = 1 << 21

// errTooLong refuses a text past MaxTokens.
func errTooLong(name string) error {
	return fmt.Errorf("%s: more than %d tokens; eval scores at most %d (4096 windows of --ctx 512, over six times wikitext-2's test text): cut the file", name, MaxTokens, MaxTokens)
}

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
	if len(t.Stream) > MaxTokens {
		return nil, errTooLong(name)
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
	return ReadIDs(bytes.NewReader(data), name, vocab, promptLen)
}

// maxIDLen is the longest item ReadIDs reads whole (a token id has at most
// 10 digits); a longer one is reported by its first bytes.
const maxIDLen = 32

// ReadIDs is ParseIDs streaming from r: each id is kept as it is read,
// and a text past MaxTokens ids is refused at id MaxTokens+1, so memory
// never follows the file's size.
func ReadIDs(r io.Reader, name string, vocab, promptLen int) (*Text, error) {
	t := &Text{Source: name}
	br := bufio.NewReaderSize(r, 64<<10)
	item := make([]byte, 0, maxIDLen+1)
	bad := func() error {
		return fmt.Errorf("%s: item %d %q is not a token id in 0..%d", name, len(t.Stream)+1, item, vocab-1)
	}
	flush := func() error {
		if len(item) == 0 {
			return nil
		}
		id, err := strconv.Atoi(string(item))
		if err != nil || id < 0 || id >= vocab {
			return bad()
		}
		if len(t.Stream) == MaxTokens {
			return errTooLong(name)
		}
		t.Stream = append(t.Stream, id)
		item = item[:0]
		return nil
	}
	for {
		c, err := br.ReadByte()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		switch {
		case c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f':
			if err := flush(); err != nil {
				return nil, err
			}
		case len(item) < maxIDLen:
			item = append(item, c)
		default: // no id is this long: refused by its first bytes
			item = append(item, "..."...)
			return nil, bad()
		}
	}
	if err := flush(); err != nil {
		return nil, err
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
