package gptq

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"sort"

	"sparkconv/calib"
	"sparkconv/fixtures"
	"sparkconv/infile"
	"sparkconv/tokenizer"
)

// EmbeddedCorpus names the calibration text built into the binary
// (fixtures.Corpus: English, code, Chinese and tool-call transcripts).
const EmbeddedCorpus = "embedded corpus"

// Defaults of the calibration (flags --tokens and --seq-len).
const (
	// DefaultBudget is the number of calibration tokens run through the
	// model. The widest linear input (down_proj, K = 6656) needs more rows
	// than channels for a full-rank Hessian: with 2048 rows its GPTQ codes
	// overfit (in-sample error 0.0008 against 0.0044 on fresh rows). 8192
	// tokens (7373 in the Hessians, 819 held out) is the whole embedded
	// corpus on a vocabulary the size of Spark's.
	DefaultBudget = 8192
	DefaultSeqLen = 512
	// MinTokens is the fewest calibration tokens accepted.
	MinTokens = 128
)

// texts reads the samples files (calib's formats; none: the embedded
// corpus) and returns the samples, the sources and the sha256 of their
// bytes concatenated in order.
func readTexts(files []string) ([]calib.Text, []string, string, error) {
	h := sha256.New()
	if len(files) == 0 {
		h.Write([]byte(fixtures.Corpus))
		t, err := calib.ParseSamples([]byte(fixtures.Corpus), EmbeddedCorpus, false)
		return t, []string{EmbeddedCorpus}, hex.EncodeToString(h.Sum(nil)), err
	}
	var texts []calib.Text
	for _, f := range files {
		if err := hashFile(h, f); err != nil {
			return nil, nil, "", err
		}
		t, err := calib.ReadSamples(f)
		if err != nil {
			return nil, nil, "", err
		}
		texts = append(texts, t...)
	}
	return texts, files, hex.EncodeToString(h.Sum(nil)), nil
}

// selectUnit is how many more tokens each sample gives per round of
// selectChunks.
const selectUnit = 64

// selectChunks keeps budget tokens spread over the samples: round after
// round, every sample's prefix grows by selectUnit tokens (the samples
// visited in van der Corput order of their position, 0, 1/2, 1/4, 3/4,
// ..., so that the budget's end does not cut off one end of the corpus:
// the embedded corpus runs English, code, Chinese, tool calls in turn)
// until the budget is spent; each prefix is then cut into chunks of at most
// seqLen tokens. A budget below the corpus thus takes a shorter prefix of
// every sample rather than whole samples from its start.
func selectChunks(chunks []calib.Chunk, budget, seqLen int) []calib.Chunk {
	ids := map[int][]int{}
	var order []int
	for _, c := range chunks {
		if _, ok := ids[c.Sample]; !ok {
			order = append(order, c.Sample)
		}
		ids[c.Sample] = append(ids[c.Sample], c.IDs...)
	}
	sort.Ints(order)
	key := make(map[int]float64, len(order))
	for i, smp := range order {
		key[smp] = vanDerCorput(uint32(i))
	}
	visit := slices.Clone(order)
	sort.SliceStable(visit, func(a, b int) bool { return key[visit[a]] < key[visit[b]] })
	taken := map[int]int{}
	total := 0
	for more := true; more && total < budget; {
		more = false
		for _, smp := range visit {
			n := min(selectUnit, len(ids[smp])-taken[smp], budget-total)
			if n > 0 {
				taken[smp] += n
				total += n
				more = true
			}
		}
	}
	var out []calib.Chunk
	for _, smp := range order {
		p := ids[smp][:taken[smp]]
		for a := 0; a < len(p); a += seqLen {
			out = append(out, calib.Chunk{Sample: smp, Start: a, IDs: p[a:min(a+seqLen, len(p))]})
		}
	}
	return out
}

// vanDerCorput is the base-2 radical inverse of i, in [0, 1).
func vanDerCorput(i uint32) float64 {
	return float64(bits.Reverse32(i)) / (1 << 32)
}

// hashFile adds the bytes of a (regular) file to h.
func hashFile(h io.Writer, path string) error {
	f, _, err := infile.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// unkID is the unknown token (model.unk_token) of the tokenizer.json
// data, or -1.
func unkID(data []byte, tok *tokenizer.Tokenizer) int {
	var v struct {
		Model struct {
			UnkToken *string `json:"unk_token"`
		} `json:"model"`
	}
	if json.Unmarshal(data, &v) != nil || v.Model.UnkToken == nil {
		return -1
	}
	if id, ok := tok.TokenToID(*v.Model.UnkToken); ok {
		return id
	}
	return -1
}

// Limits on what calibration text is accepted (checkTokens).
const (
	maxUnkShare  = 0.5  // refuse above
	warnUnkShare = 0.05 // warn above
	minDistinct  = 64   // refuse below (or below a quarter of a tiny vocabulary)
)

// checkTokens refuses calibration text that calibrates nothing: mostly the
// unknown token, or a handful of distinct ids (GPTQ on it is worse than
// round to nearest on real text). It returns a warning for a noticeable
// share of unknown tokens.
func checkTokens(chunks []calib.Chunk, unk, vocab int) (string, error) {
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
	if total < MinTokens {
		return "", fmt.Errorf("the calibration text gives %d tokens, fewer than the %d needed: add samples", total, MinTokens)
	}
	share := float64(unks) / float64(total)
	if share > maxUnkShare {
		return "", fmt.Errorf("%.0f%% of the %d calibration tokens are the unknown token: the model's tokenizer does not cover this text, and GPTQ on it would be worse than round to nearest (--rtn)", 100*share, total)
	}
	need := min(minDistinct, vocab/4)
	if len(seen) < need {
		return "", fmt.Errorf("the %d calibration tokens hold only %d distinct ids (at least %d needed): text this repetitive calibrates nothing; use varied text like the model's real input", total, len(seen), need)
	}
	if share > warnUnkShare {
		return fmt.Sprintf("%.1f%% of the calibration tokens are the unknown token", 100*share), nil
	}
	return "", nil
}
