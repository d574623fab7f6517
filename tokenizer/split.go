package tokenizer

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// regexTimeout bounds one regexp2 match attempt. The patterns in real
// tokenizer.json files are linear in practice; the bound only turns a
// pathological pattern into an error instead of a hang.
const regexTimeout = 30 * time.Second

// span is a byte range of a piece together with whether the pattern
// matched it.
type span struct {
	start, end int
	match      bool
}

// matcher finds the non-overlapping matches of a split pattern.
type matcher interface {
	// findMatches appends to out spans covering s, matched and unmatched
	// runs, exactly like the reference's Pattern::find_matches.
	findMatches(s string, out []span) ([]span, error)
}

// compileRegex compiles an Oniguruma-style pattern with regexp2 in its
// default (.NET) mode: there `\s` is Unicode White_Space and `\p{..}`
// are Unicode general categories, as with Oniguruma on UTF-8.
func compileRegex(pattern string) (re *regexp2.Regexp, err error) {
	defer func() {
		// A pattern from an untrusted file must not crash the process.
		if r := recover(); r != nil {
			re, err = nil, fmt.Errorf("compile regex %q: %v", pattern, r)
		}
	}()
	re, err = regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("compile regex %q: %w", pattern, err)
	}
	re.MatchTimeout = regexTimeout
	return re, nil
}

// regexMatcher is a matcher over a regexp2 pattern.
type regexMatcher struct {
	re *regexp2.Regexp
}

func (m regexMatcher) findMatches(s string, out []span) ([]span, error) {
	if s == "" {
		return append(out, span{0, 0, false}), nil
	}
	runes := []rune(s)
	// byteAt[i] is the byte offset of rune i; the cursor only moves
	// forward because matches come in order.
	ri, bi := 0, 0
	byteOf := func(r int) int {
		for ri < r {
			bi += utf8.RuneLen(runes[ri])
			ri++
		}
		return bi
	}
	prev := 0
	mt, err := m.re.FindRunesMatch(runes)
	for ; mt != nil && err == nil; mt, err = m.re.FindNextMatch(mt) {
		start := byteOf(mt.Index)
		end := byteOf(mt.Index + mt.Length)
		if prev != start {
			out = append(out, span{prev, start, false})
		}
		out = append(out, span{start, end, true})
		prev = end
	}
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", m.re.String(), err)
	}
	if prev != len(s) {
		out = append(out, span{prev, len(s), false})
	}
	return out, nil
}

// runeMatcher matches single runes for which pred holds, each rune its own
// match, like the reference's Pattern impl for `Fn(char) -> bool`.
type runeMatcher struct {
	pred func(rune) bool
}

func (m runeMatcher) findMatches(s string, out []span) ([]span, error) {
	if s == "" {
		return append(out, span{0, 0, false}), nil
	}
	last := 0
	for i, r := range s {
		if !m.pred(r) {
			continue
		}
		if last < i {
			out = append(out, span{last, i, false})
		}
		end := i + utf8.RuneLen(r)
		out = append(out, span{i, end, true})
		last = end
	}
	if last < len(s) {
		out = append(out, span{last, len(s), false})
	}
	return out, nil
}

// behavior is the reference's SplitDelimiterBehavior.
type behavior int

const (
	behaviorRemoved behavior = iota
	behaviorIsolated
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

func parseBehavior(name string) (behavior, error) {
	switch name {
	case "Removed":
		return behaviorRemoved, nil
	case "Isolated":
		return behaviorIsolated, nil
	case "MergedWithPrevious":
		return behaviorMergedWithPrevious, nil
	case "MergedWithNext":
		return behaviorMergedWithNext, nil
	case "Contiguous":
		return behaviorContiguous, nil
	}
	return 0, fmt.Errorf("unknown split behavior %q", name)
}

// applyBehavior turns matches into the byte ranges of the resulting
// pieces (empty ranges included; callers drop them).
func applyBehavior(spans []span, b behavior) []span {
	switch b {
	case behaviorIsolated:
		return spans
	case behaviorRemoved:
		out := spans[:0:0]
		for _, sp := range spans {
			if !sp.match {
				out = append(out, sp)
			}
		}
		return out
	case behaviorMergedWithPrevious:
		return mergeWithPrevious(spans)
	case behaviorMergedWithNext:
		return mergeWithNext(spans)
	default:
		return contiguous(spans)
	}
}

func mergeWithPrevious(spans []span) []span {
	var out []span
	prevMatch := false
	for _, sp := range spans {
		if sp.match && !prevMatch && len(out) > 0 {
			out[len(out)-1].end = sp.end
		} else {
			out = append(out, sp)
		}
		prevMatch = sp.match
	}
	return out
}

func mergeWithNext(spans []span) []span {
	var rev []span
	prevMatch := false
	for i := len(spans) - 1; i >= 0; i-- {
		sp := spans[i]
		if sp.match && !prevMatch && len(rev) > 0 {
			rev[len(rev)-1].start = sp.start
		} else {
			rev = append(rev, sp)
		}
		prevMatch = sp.match
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

func contiguous(spans []span) []span {
	var out []span
	prevMatch := false
	for _, sp := range spans {
		if sp.match == prevMatch && len(out) > 0 {
			out[len(out)-1].end = sp.end
		} else {
			out = append(out, sp)
		}
		prevMatch = sp.match
	}
	return out
}

// invertSpans flips which spans count as matches (Split's `invert`).
func invertSpans(spans []span) []span {
	for i := range spans {
		spans[i].match = !spans[i].match
	}
	return spans
}
