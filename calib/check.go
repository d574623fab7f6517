package calib

import (
	"fmt"
)

// Limits on what calibration text is accepted (Source.Take).
const (
	// MinTokens is the fewest calibration tokens accepted.
	MinTokens    = 128
	maxUnkShare  = 0.5  // refuse above
	warnUnkShare = 0.05 // warn above
	minDistinct  = 64   // refuse below (or below a quarter of a tiny vocabulary or of a short text)
)

func countTokens(chunks []Chunk) int {
	n := 0
	for _, c := range chunks {
		n += len(c.IDs)
	}
	return n
}

// CheckVariety is the rule on degenerate calibration text every
// calibrating command applies (Source.Take): it refuses text that
// calibrates nothing, mostly the unknown token unk (-1: none) or a handful
// of distinct ids (GPTQ on it is worse than round to nearest on real
// text), and returns a warning for a noticeable share of unknown tokens.
func CheckVariety(chunks []Chunk, unk, vocab int) (string, error) {
	seen := map[int]bool{}
	var total, unks int
	for _, c := range chunks {
		for _, id := range c.IDs {
			seen[id] = true
			total++
			if id == unk {
				unks++
			}
		}
	}
	if total == 0 {
		return "", fmt.Errorf("the calibration text gives no tokens")
	}
	share := float64(unks) / float64(total)
	if share > maxUnkShare {
		return "", fmt.Errorf("%.0f%% of the %d calibration tokens are the unknown token: the model's tokenizer does not cover this text, and GPTQ on it would be worse than round to nearest (--rtn)", 100*share, total)
	}
	need := min(minDistinct, vocab/4, max(2, total/4)) // a short text (a small bundle context) needs a quarter of its tokens distinct
	if len(seen) < need {
		return "", fmt.Errorf("the %d calibration tokens hold only %d distinct ids (at least %d needed): text this repetitive calibrates nothing; use varied text like the model's real input", total, len(seen), need)
	}
	if share > warnUnkShare {
		return fmt.Sprintf("%.1f%% of the calibration tokens are the unknown token", 100*share), nil
	}
	return "", nil
}
