package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// The expected values in this file are copied from the unit tests of the
// reference Rust library (huggingface/tokenizers): normalizer.rs,
// added_vocabulary.rs, pre_tokenizers/*.rs, models/bpe/model.rs and
// decoders/*.rs.

func pieceStrings(ps []piece) []string {
	out := []string{}
	for _, p := range ps {
		if p.raw {
			p.s = byteLevelString(p.s)
		}
		out = append(out, p.s)
	}
	return out
}

func mustPre(t *testing.T, js string) preTokenizer {
	t.Helper()
	p, err := parsePreTokenizer(json.RawMessage(js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return p
}

func TestSplitBehaviors(t *testing.T) {
	// SplitDelimiterBehavior's doc comment, input "the-final--countdown".
	cases := []struct {
		behavior string
		want     []string
	}{
		{"Removed", []string{"the", "final", "countdown"}},
		{"Isolated", []string{"the", "-", "final", "-", "-", "countdown"}},
		{"MergedWithPrevious", []string{"the-", "final-", "-", "countdown"}},
		{"MergedWithNext", []string{"the", "-final", "-", "-countdown"}},
		{"Contiguous", []string{"the", "-", "final", "--", "countdown"}},
	}
	for _, c := range cases {
		for _, pat := range []string{`{"String": "-"}`, `{"Regex": "-"}`} {
			p := mustPre(t, `{"type": "Split", "pattern": `+pat+`, "behavior": "`+c.behavior+`", "invert": false}`)
			got, err := p.preTokenize([]piece{{s: "the-final--countdown"}})
			if err != nil {
				t.Fatal(err)
			}
			if g := pieceStrings(got); !reflect.DeepEqual(g, c.want) {
				t.Errorf("%s %s: got %q, want %q", c.behavior, pat, g, c.want)
			}
		}
	}
}

func TestSplitInvertLikeWhitespace(t *testing.T) {
	// The reference's Whitespace pre-tokenizer is Split(`\w+|[^\w\s]+`,
	// Removed, invert=true); its tests give these splits.
	cases := map[string][]string{
		"Hey man!":           {"Hey", "man", "!"},
		"How are you doing?": {"How", "are", "you", "doing", "?"},
		"\n":                 {},
	}
	split := mustPre(t, `{"type": "Split", "pattern": {"Regex": "\\w+|[^\\w\\s]+"}, "behavior": "Removed", "invert": true}`)
	ws := mustPre(t, `{"type": "Whitespace"}`)
	for in, want := range cases {
		for name, p := range map[string]preTokenizer{"Split": split, "Whitespace": ws} {
			got, err := p.preTokenize([]piece{{s: in}})
			if err != nil {
				t.Fatal(err)
			}
			if g := pieceStrings(got); !reflect.DeepEqual(g, want) {
				t.Errorf("%s %q: got %q, want %q", name, in, g, want)
			}
		}
	}
}

func TestByteLevelPreTokenizer(t *testing.T) {
	cases := []struct {
		js, in string
		want   []string
	}{
		{`{"type": "ByteLevel", "add_prefix_space": false}`, "Hello my friend, how is your day going?",
			[]string{"Hello", "Ġmy", "Ġfriend", ",", "Ġhow", "Ġis", "Ġyour", "Ġday", "Ġgoing", "?"}},
		{`{"type": "ByteLevel", "add_prefix_space": true}`, "Hello my friend, how is your day going?",
			[]string{"ĠHello", "Ġmy", "Ġfriend", ",", "Ġhow", "Ġis", "Ġyour", "Ġday", "Ġgoing", "?"}},
		{`{"type": "ByteLevel", "add_prefix_space": false}`, "Hello there\nHello there",
			[]string{"Hello", "Ġthere", "Ċ", "Hello", "Ġthere"}},
		{`{"type": "ByteLevel", "add_prefix_space": false}`, "Hello there       dear",
			[]string{"Hello", "Ġthere", "ĠĠĠĠĠĠ", "Ġdear"}},
		{`{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}`, "Hello there",
			[]string{"HelloĠthere"}},
	}
	for _, c := range cases {
		got, err := mustPre(t, c.js).preTokenize([]piece{{s: c.in, atStart: true}})
		if err != nil {
			t.Fatal(err)
		}
		if g := pieceStrings(got); !reflect.DeepEqual(g, c.want) {
			t.Errorf("%s %q: got %q, want %q", c.js, c.in, g, c.want)
		}
	}
}

func TestMetaspace(t *testing.T) {
	p := mustPre(t, `{"type": "Metaspace", "replacement": "▁", "add_prefix_space": true}`)
	for in, want := range map[string][]string{
		"Hey friend!":   {"▁Hey", "▁friend!"},
		"Hey   friend!": {"▁Hey", "▁", "▁", "▁friend!"},
	} {
		got, err := p.preTokenize([]piece{{s: in, atStart: true}})
		if err != nil {
			t.Fatal(err)
		}
		if g := pieceStrings(got); !reflect.DeepEqual(g, want) {
			t.Errorf("%q: got %q, want %q", in, g, want)
		}
	}
	// prepend_scheme "first" only prepends at the start of the input.
	first := mustPre(t, `{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false}`)
	got, err := first.preTokenize([]piece{{s: "a b", atStart: true}, {s: "c", atStart: false}})
	if err != nil {
		t.Fatal(err)
	}
	if g, want := pieceStrings(got), []string{"▁a▁b", "c"}; !reflect.DeepEqual(g, want) {
		t.Errorf("first: got %q, want %q", g, want)
	}
}

func TestDigits(t *testing.T) {
	// pre_tokenizers/digits.rs: "Hey 123 friend!".
	for js, want := range map[string][]string{
		`{"type": "Digits", "individual_digits": false}`: {"Hey ", "123", " friend!"},
		`{"type": "Digits", "individual_digits": true}`:  {"Hey ", "1", "2", "3", " friend!"},
	} {
		got, err := mustPre(t, js).preTokenize([]piece{{s: "Hey 123 friend!"}})
		if err != nil {
			t.Fatal(err)
		}
		if g := pieceStrings(got); !reflect.DeepEqual(g, want) {
			t.Errorf("%s: got %q, want %q", js, g, want)
		}
	}
}

// tinyModel is a BPE model over vocab with no merges.
func tinyModel(t *testing.T, vocab map[string]int, opt modelFields) *bpe {
	t.Helper()
	m, err := newBPE(opt, vocab, [][2]string{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

type extracted struct {
	S  string
	ID int
}

func runExtract(t *testing.T, av *addedVocab, n normalizer, text string) []extracted {
	t.Helper()
	segs, err := extract(av, n, text)
	if err != nil {
		t.Fatal(err)
	}
	var out []extracted
	for _, s := range segs {
		out = append(out, extracted{s.s, s.id})
	}
	return out
}

// tok builds an added token like the reference's AddedToken::from(content,
// special), where normalized = !special.
func tok(content string, special bool) addedToken {
	n := !special
	return addedToken{Content: content, Special: special, Normalized: &n}
}

func TestAddedTokenExtraction(t *testing.T) {
	empty := tinyModel(t, map[string]int{}, modelFields{})
	lower := lowercase{}
	mask := func(lstrip, rstrip bool) addedToken {
		tk := tok("<mask>", false)
		tk.SingleWord, tk.LStrip, tk.RStrip = true, lstrip, rstrip
		return tk
	}
	my := tok("my", false)
	my.LStrip, my.RStrip = true, true
	ony := tok("ony", false)
	ony.SingleWord = true
	cases := []struct {
		name   string
		tokens []addedToken
		n      normalizer
		text   string
		want   []extracted
	}{
		{"can_extract_added_tokens",
			[]addedToken{tok("my", false), tok("name", false), tok("[CLS]", true), tok("[SEP]", true)}, nil,
			"[CLS] My name is Anthony [SEP]",
			[]extracted{{"[CLS]", 2}, {" My ", -1}, {"name", 1}, {" is Anthony ", -1}, {"[SEP]", 3}}},
		{"options_use_cases",
			[]addedToken{my, tok("name", false), ony, tok("[CLS]", true), tok("[SEP]", true)}, lower,
			"[CLS] My name is Anthony [SEP]",
			[]extracted{{"[CLS]", 3}, {" my ", 0}, {"name", 1}, {" is anthony ", -1}, {"[SEP]", 4}}},
		{"single_word_is_correct", []addedToken{mask(false, false)}, lower,
			"<mask> My name <mask> A<mask> <mask>ony <mask>",
			[]extracted{{"<mask>", 0}, {" my name ", -1}, {"<mask>", 0}, {" a<mask> <mask>ony ", -1}, {"<mask>", 0}}},
		{"single_word_is_unicode_correct", []addedToken{mask(false, false)}, lower,
			"<mask>, <mask>- ◌̰<mask>",
			[]extracted{{"<mask>", 0}, {", ", -1}, {"<mask>", 0}, {"- ◌̰<mask>", -1}}},
		{"lstrip_unicode_space", []addedToken{mask(true, true)}, lower,
			"Hi <mask> there\t<mask>\t<mask>\u2000",
			[]extracted{{"hi", -1}, {" <mask> ", 0}, {"there", -1}, {"\t<mask>\t", 0}, {"<mask>\u2000", 0}}},
	}
	for _, c := range cases {
		av, err := buildAddedVocab(c.tokens, empty, c.n)
		if err != nil {
			t.Fatal(err)
		}
		if got := runExtract(t, av, c.n, c.text); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

func TestAddedTokenIDs(t *testing.T) {
	// added_vocabulary.rs can_add_special_tokens.
	model := tinyModel(t, map[string]int{"test": 0, "tost": 1}, modelFields{})
	av, err := buildAddedVocab([]addedToken{
		tok("added_token_1", true), tok("added_token_2", true), tok("added_token_2", true),
		tok("test", true), tok("tost", true), tok("another_two", false),
	}, model, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"added_token_1": 2, "added_token_2": 3, "test": 0, "tost": 1, "another_two": 4}
	if !reflect.DeepEqual(av.byContent, want) {
		t.Errorf("got %v, want %v", av.byContent, want)
	}
	if !av.special["test"] || av.special["another_two"] {
		t.Errorf("special set wrong: %v", av.special)
	}
}

// TestAddedTokenIDsMatchFiles checks that the ids the reference's rule
// assigns agree with the ids written in each real tokenizer.json.
func TestAddedTokenIDsMatchFiles(t *testing.T) {
	for _, name := range goldenNames {
		data, err := os.ReadFile(filepath.Join(sharedDir(t), "tokenizers", name, "tokenizer.json"))
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			AddedTokens []addedToken `json:"added_tokens"`
		}
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatal(err)
		}
		tk := loadGolden(t, name)
		for _, at := range f.AddedTokens {
			if id, ok := tk.TokenToID(at.Content); !ok || id != at.ID {
				t.Errorf("%s: %q has id %d in the file, %d (%v) here", name, at.Content, at.ID, id, ok)
			}
		}
	}
}

func TestBPEUnknownAndByteFallback(t *testing.T) {
	unk := "<unk>"
	fb := tinyModel(t, map[string]int{"<unk>": 0, "<0x61>": 1, "<0x0A>": 2}, modelFields{UnkToken: &unk, ByteFallback: true})
	fuse := tinyModel(t, map[string]int{"<unk>": 0, "a": 1, "b": 2}, modelFields{UnkToken: &unk, FuseUnk: true})
	noFuse := tinyModel(t, map[string]int{"<unk>": 0, "a": 1, "b": 2}, modelFields{UnkToken: &unk})
	noUnk := tinyModel(t, map[string]int{"a": 1, "b": 2}, modelFields{})
	cases := []struct {
		m    *bpe
		in   string
		want []int
	}{
		{fb, "c", []int{0}}, {fb, "a", []int{1}}, {fb, "\n", []int{2}},
		{fuse, "c", []int{0}}, {fuse, "cc", []int{0}}, {fuse, "accb", []int{1, 0, 2}},
		{noFuse, "cc", []int{0, 0}}, {noFuse, "accb", []int{1, 0, 0, 2}},
		{noUnk, "acb", []int{1, 2}},
	}
	for _, c := range cases {
		if got := c.m.tokenize(c.in, nil, &scratch{}); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: got %v, want %v", c.in, got, c.want)
		}
	}
}

func TestBPEMergeOrder(t *testing.T) {
	// Lowest rank first, leftmost on ties; a merge made earlier can block a
	// lower-ranked one that would have overlapped it.
	vocab := map[string]int{"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "aa": 6, "aaa": 7}
	m, err := newBPE(modelFields{}, vocab, [][2]string{{"b", "c"}, {"a", "b"}, {"a", "bc"}, {"a", "a"}, {"aa", "a"}})
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string][]int{
		"abc":  {5}, // b c first, then a bc
		"ab":   {3},
		"aaa":  {7},    // (a a) at 0, then (aa a)
		"aaaa": {6, 6}, // (a a) at 0, then at 2: aa aa has no merge
		"cab":  {2, 3},
		"abab": {3, 3},
		"bcbc": {4, 4},
		"abca": {5, 0},
		"x":    []int(nil), // unknown, no unk token: dropped
	} {
		if got := m.tokenize(in, nil, &scratch{}); !reflect.DeepEqual(got, want) {
			t.Errorf("%q: got %v, want %v", in, got, want)
		}
	}
}

func mustDecoder(t *testing.T, js string) decoder {
	t.Helper()
	d, err := parseDecoder(json.RawMessage(js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return d
}

func TestDecoders(t *testing.T) {
	cases := []struct {
		js       string
		in, want []string
	}{
		{`{"type": "ByteFallback"}`, []string{"Hey", "friend!"}, []string{"Hey", "friend!"}},
		{`{"type": "ByteFallback"}`, []string{"<0x61>"}, []string{"a"}},
		{`{"type": "ByteFallback"}`, []string{"<0xE5>"}, []string{"\uFFFD"}},
		{`{"type": "ByteFallback"}`, []string{"<0xE5>", "<0x8f>"}, []string{"\uFFFD", "\uFFFD"}},
		{`{"type": "ByteFallback"}`, []string{"<0xE5>", "<0x8f>", "<0xab>"}, []string{"叫"}},
		{`{"type": "ByteFallback"}`, []string{"<0xE5>", "<0x8f>", "<0xab>", "a"}, []string{"叫", "a"}},
		{`{"type": "ByteFallback"}`, []string{"<0xE5>", "<0x8f>", "a"}, []string{"\uFFFD", "\uFFFD", "a"}},
		{`{"type": "Fuse"}`, []string{"Hey", " friend!"}, []string{"Hey friend!"}},
		{`{"type": "Strip", "content": "H", "start": 1, "stop": 0}`, []string{"Hey", " friend!", "HHH"}, []string{"ey", " friend!", "HH"}},
		{`{"type": "Strip", "content": "y", "start": 0, "stop": 1}`, []string{"Hey", " friend!"}, []string{"He", " friend!"}},
		{`{"type": "Metaspace", "replacement": "▁", "add_prefix_space": true}`, []string{"▁Hey", "▁friend!"}, []string{"Hey", " friend!"}},
		{`{"type": "ByteLevel"}`, []string{"Hello", "Ġmy", "Ġfriend", ",", "Ġhow", "Ġis", "Ġyour", "Ġday", "Ġgoing", "?"},
			[]string{"Hello my friend, how is your day going?"}},
		{`{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}`, []string{"▁Hey", "▁friend!"}, []string{" Hey", " friend!"}},
		{`{"type": "BPEDecoder", "suffix": "</w>"}`, []string{"My</w>", "na", "me</w>"}, []string{"My ", "na", "me"}},
	}
	for _, c := range cases {
		if got := mustDecoder(t, c.js).decodeChain(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s %q: got %q, want %q", c.js, c.in, got, c.want)
		}
	}
}

func TestNormalizers(t *testing.T) {
	cases := []struct{ js, in, want string }{
		{`{"type": "Lowercase"}`, "HELLO İstanbul", "hello i\u0307stanbul"},
		{`{"type": "Strip", "strip_left": true, "strip_right": true}`, "  \u3000hi\t\n", "hi"},
		{`{"type": "Strip", "strip_left": false, "strip_right": true}`, "  hi  ", "  hi"},
		{`{"type": "StripAccents"}`, "e\u0301a\u0300", "ea"},
		{`{"type": "NFD"}`, "é", "e\u0301"},
		{`{"type": "NFKC"}`, "ﬁ①", "fi1"},
		{`{"type": "Prepend", "prepend": "▁"}`, "hi", "▁hi"},
		{`{"type": "Prepend", "prepend": "▁"}`, "", ""},
		{`{"type": "Replace", "pattern": {"String": " "}, "content": "▁"}`, "a b  c", "a▁b▁▁c"},
		{`{"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}`, "a \t\nb", "a b"},
		{`{"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}`,
			" a", "▁▁a"},
	}
	for _, c := range cases {
		n, err := parseNormalizer(json.RawMessage(c.js))
		if err != nil {
			t.Fatalf("%s: %v", c.js, err)
		}
		got, err := n.normalize(c.in)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s %q: got %q, want %q", c.js, c.in, got, c.want)
		}
	}
}

func TestLossyUTF8(t *testing.T) {
	// Rust's String::from_utf8_lossy replaces each maximal invalid subpart.
	cases := map[string]string{
		"ok":                 "ok",
		"\xff\xff":           "\uFFFD\uFFFD",
		"a\xe2\x82":          "a\uFFFD",
		"\xe2\x82a":          "\uFFFDa",
		"\xf0\x9f\x98":       "\uFFFD",
		"\xed\xa0\x80":       "\uFFFD\uFFFD\uFFFD", // surrogate: E0..9F rule for ED
		"\xc0\xaf":           "\uFFFD\uFFFD",
		"\xf4\x90\x80\x80":   "\uFFFD\uFFFD\uFFFD\uFFFD",
		"\xe0\x80\x80":       "\uFFFD\uFFFD\uFFFD",
		"x\xf0\x9f\x98\x80y": "x😀y",
	}
	for in, want := range cases {
		if got := lossyUTF8([]byte(in)); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}
