package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

// TestModels pins each model type's edge cases on tiny hand-written
// vocabularies (the trained goldens cover the common paths).
func TestModels(t *testing.T) {
	for _, tc := range []struct {
		name, json, text string
		want             []int
		err              string
	}{
		{"wordpiece greedy longest", `{"type": "WordPiece", "vocab": {"[UNK]": 0, "un": 1, "##aff": 2, "##able": 3, "una": 4, "##ff": 5}}`,
			"unaffable", []int{4, 5, 3}, ""},
		{"wordpiece unmatchable rest is one unk", `{"type": "WordPiece", "vocab": {"[UNK]": 0, "ab": 1, "##c": 2}}`, "abcd", []int{0}, ""},
		{"wordpiece max chars", `{"type": "WordPiece", "vocab": {"[UNK]": 0, "a": 1, "##a": 2}, "max_input_chars_per_word": 3}`, "aaa aaaa", []int{1, 2, 2, 0}, ""},
		{"wordpiece custom prefix", `{"type": "WordPiece", "vocab": {"<u>": 7, "a": 1, "@@b": 2}, "unk_token": "<u>", "continuing_subword_prefix": "@@"}`, "ab", []int{1, 2}, ""},
		{"wordpiece missing unk", `{"type": "WordPiece", "vocab": {"a": 1}}`, "b", nil, `unk token "[UNK]" is missing`},
		{"wordlevel", `{"type": "WordLevel", "vocab": {"<unk>": 0, "hi": 1, "there": 2}}`, "hi you there", []int{1, 0, 2}, ""},
		{"wordlevel missing unk", `{"type": "WordLevel", "vocab": {"hi": 1}, "unk_token": "[X]"}`, "ho", nil, `unk token "[X]" is missing`},
		{"unigram best path", `{"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0], ["a", -1], ["b", -1], ["ab", -1.5], ["abc", -5], ["c", -1]]}`,
			"abc", []int{3, 5}, ""},
		{"unigram ties keep the path that reached the end first", `{"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0], ["a", -1], ["aa", -2]]}`,
			"aa", []int{2}, ""},
		{"unigram fuses unks", `{"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0], ["a", -1]]}`, "axyza", []int{1, 0, 1}, ""},
		{"unigram byte fallback", `{"type": "Unigram", "unk_id": 0, "byte_fallback": true, "vocab": [["<unk>", 0], ["a", -1], ["<0xC3>", 0], ["<0xA9>", 0]]}`,
			"aéa", []int{1, 2, 3, 1}, ""},
		{"unigram byte fallback needs every byte", `{"type": "Unigram", "unk_id": 0, "byte_fallback": true, "vocab": [["<unk>", 0], ["<0xC3>", 0]]}`,
			"é", []int{0}, ""},
		{"unigram without unk", `{"type": "Unigram", "unk_id": null, "vocab": [["a", -1]]}`, "ab", nil, "no unk_id"},
		{"untagged unigram", `{"unk_id": 0, "vocab": [["<unk>", 0], ["x", -1]]}`, "x", []int{1}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk, err := Parse([]byte(`{"pre_tokenizer": {"type": "WhitespaceSplit"}, "model": ` + tc.json + `}`))
			if err != nil {
				t.Fatal(err)
			}
			got, err := tk.Encode(tc.text, false)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("Encode(%q) = %v, %v; want %v", tc.text, got, err, tc.want)
			}
		})
	}
}

// TestModelLoadErrors: malformed models name what is wrong.
func TestModelLoadErrors(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"type": "Unigram", "vocab": [["a", "x"]]}`, `vocab[0] "a": score`},
		{`{"type": "Unigram", "unk_id": 3, "vocab": [["a", -1]]}`, "unk_id 3 is outside"},
		{`{"type": "Unigram", "vocab": []}`, "empty vocab"},
		{`{"type": "WordLevel", "vocab": [["a", -1]]}`, "vocab must be an object"},
		{`{"type": "Foo", "vocab": {}}`, `unsupported type "Foo"`},
		{`{"type": "BPE", "vocab": {}}`, "missing merges"},
	} {
		_, err := Parse([]byte(`{"model": ` + tc.json + `}`))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.json, err, tc.want)
		}
	}
}

// TestNormalizersNew pins BertNormalizer and Nmt.
func TestNormalizersNew(t *testing.T) {
	for _, tc := range []struct{ json, in, want string }{
		{`{"type": "BertNormalizer"}`, "Héllo\tWÖRLD\u0000\u200b中文", "hello world 中  文 "},
		{`{"type": "BertNormalizer", "lowercase": false}`, "Héllo", "Héllo"},
		{`{"type": "BertNormalizer", "lowercase": false, "strip_accents": true, "handle_chinese_chars": false}`, "Héllo中", "Hello中"},
		{`{"type": "BertNormalizer", "clean_text": false, "lowercase": false}`, "a\tb\u0001", "a\tb\u0001"},
		{`{"type": "Nmt"}`, "a\u0001b\tc\u200bd\u2581e\ufeff", "ab c d e "},
	} {
		n, err := parseNormalizer([]byte(tc.json))
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := n.normalize(tc.in); got != tc.want {
			t.Errorf("%s(%q) = %q, want %q", tc.json, tc.in, got, tc.want)
		}
	}
}

// TestUnicodeScripts: cuts at script changes; kana count as Han; spaces
// join their neighbours.
func TestUnicodeScripts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"abc,def", []string{"abc", ",", "def"}},
		{"ab cd", []string{"ab cd"}},
		{"日本語のテキストです", []string{"日本語のテキストです"}},
		{"Приветworld", []string{"Привет", "world"}},
		{" x", []string{"x"}},
		{"x1y", []string{"x", "1", "y"}},
	} {
		out, _ := unicodeScripts{}.preTokenize([]piece{{s: tc.in, atStart: true}})
		var got []string
		for _, p := range out {
			got = append(got, p.s)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestUnkID: each model type's unknown token id, -1 without one.
func TestUnkID(t *testing.T) {
	for _, tc := range []struct {
		json string
		want int
	}{
		{`{"type": "BPE", "vocab": {"a": 0, "<u>": 1}, "merges": [], "unk_token": "<u>"}`, 1},
		{`{"type": "BPE", "vocab": {"a": 0}, "merges": [], "unk_token": null}`, -1},
		{`{"type": "WordPiece", "vocab": {"a": 1, "[UNK]": 3}}`, 3},
		{`{"type": "WordLevel", "vocab": {"<unk>": 2, "hi": 1}, "unk_token": "<unk>"}`, 2},
		{`{"type": "WordLevel", "vocab": {"hi": 1}, "unk_token": "[X]"}`, -1},
		{`{"type": "Unigram", "unk_id": 1, "vocab": [["a", -1], ["<unk>", 0]]}`, 1},
		{`{"type": "Unigram", "unk_id": null, "vocab": [["a", -1]]}`, -1},
	} {
		tk, err := Parse([]byte(`{"model": ` + tc.json + `}`))
		if err != nil {
			t.Fatalf("%s: %v", tc.json, err)
		}
		if got := tk.UnkID(); got != tc.want {
			t.Errorf("%s: UnkID %d, want %d", tc.json, got, tc.want)
		}
	}
}
