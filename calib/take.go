package calib

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"

	"sparkconv/tokenizer"
)

// Source is the one path from calibration text to chunks: the samples
// files (or a built-in text), the tokenizer that encodes them, and the
// rules every calibrating command applies to what it takes (MinTokens
// and CheckVariety, or a count rule of the command's own), with one sink
// for their warnings. Take reads the text streamed (a second time first
// for a rule that needs the number of samples) under a Rule that says
// which tokens each command keeps.
type Source struct {
	Files   []string // samples files (ReadSamples' formats); none: Default
	Default Builtin
	Tok     *tokenizer.Tokenizer
	Vocab   int // the model's vocab_size: an id at or above it is refused
	// MinTokens is the fewest tokens accepted (the calibrating commands
	// pass calib.MinTokens); MinFlag, if set, is the flag that sets it,
	// named in the refusal. 0: no count rule here (the command has its
	// own, Also).
	MinTokens int
	MinFlag   string
	// Also is a rule of the command's own on the number of tokens taken,
	// checked beside the variety rule so that every problem is reported
	// at once (qnn-bundle's on its context and window); nil: none.
	Also func(tokens int) (warn string, err error)
	Log  io.Writer // warnings, one "sparkconv: warning:" line each; nil: none
}

// Taken is what Take kept of the text.
type Taken struct {
	Chunks []Chunk
	Texts  []Text // the samples kept, by Chunk.Sample (Rule All only)
	Tokens int
	Read   Read
}

// Where names the text in messages: its files, or the built-in text.
func (t *Taken) Where() string { return strings.Join(t.Read.Sources, ", ") }

// Rule is which tokens a command takes from the samples, applied while
// they are read: Prefix, Share, Spread, All. A Rule value serves one Take.
type Rule interface {
	// start is called once before the samples are offered, with their
	// count when count() says the rule needs it (-1 otherwise).
	start(samples int)
	// offer gives the rule sample i, its text and its tokens (a slice of
	// its own, which the rule may keep); it says whether later samples
	// are still needed.
	offer(i int, t Text, ids []int) bool
	// take is the chunks kept once the text is read.
	take() ([]Chunk, []Text)
	// count says whether start needs the number of samples (a second
	// pass over the text).
	count() bool
	// valid refuses the rule's own values.
	valid() error
}

// validSeqLen refuses a chunk length below one token.
func validSeqLen(n int) error {
	if n < 1 {
		return fmt.Errorf("sequence length %d, must be >= 1", n)
	}
	return nil
}

// Take reads the samples under rule, checks what it kept and sends any
// warning to the Log.
func (s Source) Take(rule Rule) (*Taken, error) {
	t, err := s.read(rule)
	if err != nil {
		return nil, err
	}
	return t, s.check(t)
}

// read reads the samples under rule, unchecked.
func (s Source) read(rule Rule) (*Taken, error) {
	if err := rule.valid(); err != nil {
		return nil, err
	}
	n := -1
	var first Read
	if rule.count() {
		var err error
		if first, err = EachSample(s.Files, s.Default, func(Text) error { return nil }); err != nil {
			return nil, err
		}
		n = first.Samples
	}
	rule.start(n)
	more := true
	i := 0
	rd, err := EachSample(s.Files, s.Default, func(t Text) error {
		defer func() { i++ }()
		if !more {
			return nil
		}
		ids, err := encode(s.Tok, t, s.Vocab)
		if err != nil {
			return err
		}
		more = rule.offer(i, t, ids)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if rule.count() && rd.SHA256 != first.SHA256 {
		return nil, fmt.Errorf("%s: changed while sparkconv was reading it; nothing written, run again", strings.Join(rd.Sources, ", "))
	}
	t := &Taken{Read: rd}
	t.Chunks, t.Texts = rule.take()
	t.Tokens = countTokens(t.Chunks)
	return t, nil
}

// check applies the count rule (MinTokens or the command's Also) and the
// variety rule to t, every problem at once, and logs the warnings.
func (s Source) check(t *Taken) error {
	var errs []error
	var warns []string
	if min := s.MinTokens; min > 0 && t.Tokens < min {
		by := ""
		if s.MinFlag != "" {
			by = " (" + s.MinFlag + ")"
		}
		errs = append(errs, fmt.Errorf("the calibration text gives %d tokens, fewer than the %d needed%s: add samples", t.Tokens, min, by))
	}
	if s.Also != nil {
		w, err := s.Also(t.Tokens)
		errs, warns = append(errs, err), append(warns, w)
	}
	w, err := CheckVariety(t.Chunks, s.Tok.UnkID(), s.Vocab)
	errs, warns = append(errs, err), append(warns, w)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: %w", t.Where(), err)
	}
	if s.Log != nil {
		for _, w := range warns {
			if w != "" {
				fmt.Fprintf(s.Log, "sparkconv: warning: %s: %s\n", t.Where(), w)
			}
		}
	}
	return nil
}

// selectStream is the PCG stream of All's draw ("calib").
const selectStream = 0x63616c6962

// Prefix takes the first Tokens tokens of the samples in order, each
// sample cut into chunks of at most SeqLen tokens (rotate --smooth-down;
// qnn-bundle, in one chunk). The samples after the last token taken are
// read and checked, not encoded.
type Prefix struct {
	Tokens, SeqLen int
	chunks         []Chunk
	n              int
}

func (p *Prefix) start(int)    {}
func (p *Prefix) count() bool  { return false }
func (p *Prefix) valid() error { return validSeqLen(p.SeqLen) }
func (p *Prefix) offer(i int, _ Text, ids []int) bool {
	ids = ids[:min(len(ids), p.Tokens-p.n)]
	p.chunks = appendChunks(p.chunks, i, ids, p.SeqLen)
	p.n += len(ids)
	return p.n < p.Tokens
}
func (p *Prefix) take() ([]Chunk, []Text) { return p.chunks, nil }

// All takes every sample, or MaxSamples of them drawn with Seed (Select),
// each cut into chunks of at most SeqLen tokens (calibrate), and keeps the
// samples' texts for its record.
type All struct {
	MaxSamples int
	Seed       uint64
	SeqLen     int
	keep       map[int]bool // the drawn samples (nil: all)
	chunks     []Chunk
	texts      []Text
}

func (a *All) count() bool  { return a.MaxSamples > 0 }
func (a *All) valid() error { return validSeqLen(a.SeqLen) }
func (a *All) start(n int) {
	if a.MaxSamples <= 0 || a.MaxSamples >= n {
		return
	}
	a.keep = map[int]bool{}
	for _, i := range rand.New(rand.NewPCG(a.Seed, selectStream)).Perm(n)[:a.MaxSamples] {
		a.keep[i] = true
	}
}
func (a *All) offer(i int, t Text, ids []int) bool {
	if a.keep == nil || a.keep[i] {
		a.chunks = appendChunks(a.chunks, len(a.texts), ids, a.SeqLen)
		a.texts = append(a.texts, t)
	}
	return true
}
func (a *All) take() ([]Chunk, []Text) { return a.chunks, a.texts }

// Spread takes the first ChunkLen tokens of samples at an even stride over
// the text until Tokens tokens (keep-float: positions from every part of
// the corpus, each chunk a sample's start).
type Spread struct {
	Tokens, ChunkLen int
	samples, n       int
	stride, next     float64
	offered          int
	chunks           []Chunk
}

func (s *Spread) count() bool  { return true }
func (s *Spread) valid() error { return validSeqLen(s.ChunkLen) }
func (s *Spread) start(n int) {
	want := max(1, (s.Tokens+s.ChunkLen-1)/s.ChunkLen)
	s.samples, s.stride = n, max(1, float64(n)/float64(want))
}
func (s *Spread) more() bool { return int(s.next) < s.samples && s.n < s.Tokens }
func (s *Spread) offer(_ int, _ Text, ids []int) bool {
	i := s.offered
	s.offered++
	if i == int(s.next) && s.more() {
		c := Chunk{Sample: i, IDs: slices.Clone(ids[:min(len(ids), s.ChunkLen, s.Tokens-s.n)])}
		s.chunks = append(s.chunks, c)
		s.n += len(c.IDs)
		s.next += s.stride
	}
	return s.more()
}
func (s *Spread) take() ([]Chunk, []Text) { return s.chunks, nil }
