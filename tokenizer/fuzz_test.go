package tokenizer

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// tinyCorpus trains the self-contained tokenizer the fuzz targets use.
const tinyCorpus = `The quick brown fox jumps over the lazy dog. It's 2024; we'll see.
func main() {
	fmt.Println("hello, world") // 12345
}
Les élèves ont étudié. 中文分词测试，日本語のテキスト。 Ünïcödé  spaces   and	tabs
<|im_start|>user
What is 2+2?<|im_end|>
`

var (
	tinyOnce sync.Once
	tinyTok  *Tokenizer
	tinyJSON []byte
	tinyErr  error
)

// tinyTokenizer is a 400-token byte-level BPE trained on tinyCorpus.
func tinyTokenizer(t testing.TB) (*Tokenizer, []byte) {
	t.Helper()
	tinyOnce.Do(func() {
		if tinyJSON, tinyErr = TrainByteLevelBPE(tinyCorpus, 400); tinyErr == nil {
			tinyTok, tinyErr = Parse(tinyJSON)
		}
	})
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	return tinyTok, tinyJSON
}

var fuzzSeeds = []string{
	"", " ", "hello world", "It's   fine\r\n\r\n", "<|im_start|>x<|im_end|>", "<|im_end", "e\u0301\u0323",
	"中文 123456 ½", "\x00\x01\t\v\f\u0085\u2028\u00A0", "👍🏽👨‍👩‍👧 🇩🇪", "\xff\xfe invalid", "a" + strings.Repeat("\u0301", 40),
	"<s> </s> <unk> ▁x", "'S 'LL 'ſ", strings.Repeat(" ", 300) + "x",
}

// FuzzEncode: encoding never panics, ids are in range, and byte-level
// models decode back to the normalized input.
func FuzzEncode(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	tiny, _ := tinyTokenizer(f)
	// The real tokenizers join in when the shared data is present.
	var llama3, llama2 *Tokenizer
	if dir := findShared(); dir != "" {
		llama3 = loadGolden(f, "llama3")
		llama2 = loadGolden(f, "llama2")
	}
	trained := loadTrained(f)
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 4096 {
			return
		}
		checkRoundTrip(t, tiny, s)
		for _, tk := range trained { // every model type: no error, ids in range
			for _, special := range []bool{false, true} {
				ids, err := tk.Encode(s, special)
				if err != nil {
					t.Fatalf("encode %q: %v", s, err)
				}
				for _, id := range ids {
					if _, ok := tk.IDToToken(id); !ok || id >= tk.VocabSize() {
						t.Fatalf("encode %q: id %d out of vocabulary", s, id)
					}
				}
				_ = tk.Decode(ids, special)
			}
		}
		if llama3 != nil {
			ids := checkRoundTrip(t, llama3, s)
			if !strings.Contains(s, "<|") && utf8.ValidString(s) && llama3.Decode(ids, false) != s {
				t.Fatalf("llama3: decode(encode(%q)) = %q", s, llama3.Decode(ids, false))
			}
		}
		if llama2 != nil {
			ids := checkRoundTrip(t, llama2, s)
			plain := utf8.ValidString(s) && !strings.ContainsAny(s, "▁<")
			// With <s> kept the reference decodes "<s> text"; skipping it
			// gives the text back.
			if got := llama2.Decode(ids, true); plain && got != s {
				t.Fatalf("llama2: decode(encode(%q)) = %q", s, got)
			}
		}
	})
}

// checkRoundTrip encodes s, checks the ids, and for byte-level models
// (ByteLevel decoder) checks that decoding gives back the extracted,
// normalized text with the added tokens in place.
func checkRoundTrip(t *testing.T, tk *Tokenizer, s string) []int {
	t.Helper()
	ids, err := tk.Encode(s, true)
	if err != nil {
		t.Fatalf("encode %q: %v", s, err)
	}
	for _, id := range ids {
		if _, ok := tk.IDToToken(id); !ok || id >= tk.VocabSize() {
			t.Fatalf("encode %q: id %d out of vocabulary", s, id)
		}
	}
	if _, ok := tk.decoder.(byteLevelDec); !ok {
		return ids
	}
	segs, err := extract(tk.added, tk.normalizer, validUTF8(s))
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, seg := range segs {
		if seg.id >= 0 {
			tok, _ := tk.IDToToken(seg.id)
			want.WriteString(tok)
		} else {
			want.WriteString(seg.s)
		}
	}
	if got := tk.Decode(ids, false); got != want.String() {
		t.Fatalf("decode(encode(%q)) = %q, want %q", s, got, want.String())
	}
	return ids
}

// loadTrained loads the tokenizers of every model type in testdata/tokenizers/trained.
func loadTrained(tb testing.TB) []*Tokenizer {
	dirs, err := filepath.Glob(filepath.Join(trainedDir(), "*", "tokenizer.json"))
	if err != nil || len(dirs) == 0 {
		tb.Fatalf("no trained tokenizers: %v", err)
	}
	var out []*Tokenizer
	for _, path := range dirs {
		tk, err := Load(path)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, tk)
	}
	return out
}

// findShared is the checked-in copy of the shared ground truth.
func findShared() string { return filepath.Join("..", "testdata") }

// FuzzParse: Parse never panics on arbitrary bytes, and whatever it
// accepts can encode and decode without panicking.
func FuzzParse(f *testing.F) {
	_, tiny := tinyTokenizer(f)
	f.Add(tiny)
	for _, s := range parseSeeds {
		f.Add([]byte(s))
	}
	f.Add(tiny[:len(tiny)/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		tk, err := Parse(data)
		if err != nil {
			return
		}
		ids, err := tk.Encode("Hé 1 <s>\n x", true) // short: fuzzed regexes may backtrack exponentially
		if err != nil {
			return
		}
		_ = tk.Decode(append(ids, -1, 0, 1<<30), true)
		_ = tk.Decode(ids, false)
	})
}

// parseSeeds exercise every component type and both merge formats.
var parseSeeds = []string{
	`{}`, `null`, `[]`, `{"model": null}`,
	`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}`,
	`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]}, "version": "1.0"}`,
	`{"model": {"vocab": {"a": 0, "b": 1, "ab": 2, "<unk>": 3, "<0x41>": 4}, "merges": ["#version: 0.2", "a b"], "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true}}`,
	`{"model": {"vocab": {"a": 0}, "merges": ["a b"]}}`,
	`{"model": {"vocab": {"a": 99999999}, "merges": []}}`,
	`{"model": {"vocab": {"a": -1}, "merges": []}}`,
	`{"model": {"vocab": {"\u00e9\\n": 0}, "merges": [], "continuing_subword_prefix": "##", "end_of_word_suffix": "</w>"}}`,
	`{"added_tokens": [{"id": 5, "content": "<s>", "special": true, "lstrip": true, "rstrip": true, "single_word": true, "normalized": true}],
	  "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}, {"type": "Strip"}, {"type": "StripAccents"},
	    {"type": "Prepend", "prepend": "▁"}, {"type": "Append", "append": "!"}, {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}, {"type": "NFD"}, {"type": "NFC"}, {"type": "NFKD"}, {"type": "ByteLevel"}]},
	  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true},
	    {"type": "Digits", "individual_digits": true}, {"type": "Whitespace"}, {"type": "WhitespaceSplit"}, {"type": "Punctuation", "behavior": "Contiguous"},
	    {"type": "BertPreTokenizer"}, {"type": "CharDelimiterSplit", "delimiter": "x"}, {"type": "Split", "pattern": {"String": "o"}, "behavior": "MergedWithNext", "invert": true},
	    {"type": "ByteLevel", "add_prefix_space": true, "use_regex": true}]},
	  "post_processor": {"type": "Sequence", "processors": [{"type": "ByteLevel"}, {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0]},
	    {"type": "BertProcessing", "sep": ["[SEP]", 102], "cls": ["[CLS]", 101]},
	    {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}]},
	  "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
	    {"type": "Strip", "content": " ", "start": 1, "stop": 0}, {"type": "Metaspace"}, {"type": "ByteLevel"}, {"type": "BPEDecoder"}, {"type": "WordPiece"}]},
	  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]}}`,
	`{"model": {"type": "WordPiece", "vocab": {}}}`,
	`{"model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "h": 1, "##é": 2, "##x": 3}, "max_input_chars_per_word": 3}, "normalizer": {"type": "BertNormalizer", "strip_accents": false}}`,
	`{"model": {"type": "WordLevel", "vocab": {"a": 0, "b": 1}, "unk_token": "b"}, "pre_tokenizer": {"type": "UnicodeScripts"}}`,
	`{"model": {"type": "WordLevel", "vocab": {"a": 0}}, "normalizer": {"type": "Nmt"}}`,
	`{"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0], ["▁", -1.5], ["H", -2], ["é", -3], ["<0x31>", 0]], "byte_fallback": true}}`,
	`{"model": {"type": "Unigram", "unk_id": null, "vocab": [["a", -1]]}}`,
	`{"model": {"type": "Unigram", "unk_id": 7, "vocab": [["a", "x"]]}}`,
	`{"model": {"vocab": [["a", -1], ["b"]]}}`,
	`{"model": {"vocab": {}, "merges": []}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"}}`,
	`{"model": {"vocab": {}, "merges": []}, "trailing": [1, 2, {"x": [true, false, null, -1.5e3]}]} junk`,
}
