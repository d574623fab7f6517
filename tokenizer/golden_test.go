package tokenizer

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// goldenNames are the reference tokenizers under testdata/tokenizers.
var goldenNames = []string{"qwen3", "llama3", "deepseek_v3", "llama2"}

// sharedDir is the project's copy of the shared ground truth (the
// reference tokenizers and their golden ids), checked in under testdata/.
func sharedDir(t testing.TB) string {
	t.Helper()
	return filepath.Join("..", "testdata")
}

var (
	loadedMu sync.Mutex
	loaded   = map[string]*Tokenizer{}
)

// loadGolden loads (once per test binary) a reference tokenizer.
func loadGolden(t testing.TB, name string) *Tokenizer {
	t.Helper()
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if tk, ok := loaded[name]; ok {
		return tk
	}
	path := filepath.Join(sharedDir(t), "tokenizers", name, "tokenizer.json")
	start := time.Now()
	tk, err := Load(path)
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	t.Logf("loaded %s in %v (vocab size %d)", name, time.Since(start), tk.VocabSize())
	loaded[name] = tk
	return tk
}

type goldenRecord struct {
	Text    string   `json:"text"`
	IDs     []int    `json:"ids"`
	Tokens  []string `json:"tokens"`
	Decoded string   `json:"decoded"`
}

func readJSONL(t testing.TB, path string) []goldenRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open golden: %v", err)
	}
	defer f.Close()
	var out []goldenRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for n := 1; sc.Scan(); n++ {
		var r goldenRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s:%d: %v", path, n, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return out
}

// goldenTexts returns the public input texts.
func goldenTexts(t testing.TB) []string {
	recs := readJSONL(t, filepath.Join(sharedDir(t), "tokenizers", "golden", "public.jsonl"))
	texts := make([]string, len(recs))
	for i, r := range recs {
		texts[i] = r.Text
	}
	return texts
}

// TestGolden checks every public line, plain and with special tokens,
// against the ids the reference library produced.
func TestGolden(t *testing.T) {
	texts := goldenTexts(t)
	if len(texts) == 0 {
		t.Fatal("no golden texts")
	}
	for _, name := range goldenNames {
		t.Run(name, func(t *testing.T) {
			tk := loadGolden(t, name)
			for _, variant := range []struct {
				suffix  string
				special bool
			}{{".public.jsonl", false}, {".public.special.jsonl", true}} {
				want := readJSONL(t, filepath.Join(sharedDir(t), "tokenizers", "golden", name+variant.suffix))
				if len(want) != len(texts) {
					t.Fatalf("%s%s has %d lines, public.jsonl %d", name, variant.suffix, len(want), len(texts))
				}
				ok := 0
				for i, text := range texts {
					got, err := tk.Encode(text, variant.special)
					if err != nil {
						t.Errorf("line %d: %v", i+1, err)
						continue
					}
					if d := firstDiff(got, want[i].IDs); d >= 0 {
						t.Errorf("%s%s line %d: first difference at token %d: got %s, want %s (%d vs %d tokens)",
							name, variant.suffix, i+1, d, describe(tk, got, d), describeWant(want[i], d), len(got), len(want[i].IDs))
						continue
					}
					ok++
				}
				t.Logf("%s%s: %d/%d lines match", name, variant.suffix, ok, len(texts))
			}
		})
	}
}

// firstDiff is the index of the first differing id, or -1.
func firstDiff(got, want []int) int {
	for i := 0; i < len(got) && i < len(want); i++ {
		if got[i] != want[i] {
			return i
		}
	}
	if len(got) != len(want) {
		return min(len(got), len(want))
	}
	return -1
}

func describe(tk *Tokenizer, ids []int, i int) string {
	if i >= len(ids) {
		return "<end>"
	}
	tok, _ := tk.IDToToken(ids[i])
	b, _ := json.Marshal(tok)
	return string(b) + "=" + itoa(ids[i])
}

func describeWant(r goldenRecord, i int) string {
	if i >= len(r.IDs) {
		return "<end>"
	}
	tok := ""
	if i < len(r.Tokens) {
		tok = r.Tokens[i]
	}
	b, _ := json.Marshal(tok)
	return string(b) + "=" + itoa(r.IDs[i])
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestGoldenDecode decodes the reference's ids. Byte-level models must give
// back the normalized text with added tokens in place; Llama-2 (skipping
// <s>) must give back the text itself when it holds no "▁" or "<".
func TestGoldenDecode(t *testing.T) {
	texts := goldenTexts(t)
	for _, name := range goldenNames {
		tk := loadGolden(t, name)
		want := readJSONL(t, filepath.Join(sharedDir(t), "tokenizers", "golden", name+".public.special.jsonl"))
		checked := 0
		for i, text := range texts {
			got := tk.Decode(want[i].IDs, name == "llama2")
			var exp string
			if name == "llama2" {
				if strings.ContainsAny(text, "▁<") {
					continue
				}
				exp = text
			} else {
				segs, err := extract(tk.added, tk.normalizer, text)
				if err != nil {
					t.Fatal(err)
				}
				var sb strings.Builder
				for _, s := range segs {
					if s.id >= 0 {
						tok, _ := tk.IDToToken(s.id)
						sb.WriteString(tok)
					} else {
						sb.WriteString(s.s)
					}
				}
				exp = sb.String()
			}
			if got != exp {
				t.Errorf("%s line %d: decode gives %q, want %q", name, i+1, got, exp)
				continue
			}
			checked++
		}
		t.Logf("%s: %d lines decode back exactly", name, checked)
	}
}
