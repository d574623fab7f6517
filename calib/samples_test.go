package calib

import (
	"io"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseSamples(t *testing.T) {
	tests := []struct {
		name  string
		data  string
		jsonl bool
		want  []string // sample texts, or nil with err
		lines []int
		err   string
	}{
		{name: "two", data: "a\nb\n---\nc\n", want: []string{"a\nb", "c"}, lines: []int{1, 4}},
		{name: "no final newline", data: "a\n---\nc", want: []string{"a", "c"}, lines: []int{1, 3}},
		{name: "crlf", data: "a\r\n---\r\nc\r\n", want: []string{"a", "c"}},
		{name: "separator with spaces", data: "a\n  --- \nc\n", want: []string{"a", "c"}},
		{name: "trailing separator", data: "a\n---\nc\n---\n\n", want: []string{"a", "c"}},
		{name: "keeps inner blank lines", data: "a\n\n  b\n\n---\nc", want: []string{"a\n\n  b\n", "c"}},
		{name: "dashes inside a line", data: "a --- b\n----\n", want: []string{"a --- b\n----"}},
		{name: "single", data: "hello", want: []string{"hello"}},
		{name: "empty file", data: "", err: "corpusFile.txt: sample 1 (line 1) is empty"},
		{name: "empty middle", data: "a\n---\n  \n---\nb", err: "corpusFile.txt: sample 2 (line 3) is empty"},
		{name: "leading separator", data: "---\na", err: "sample 1 (line 1) is empty"},
		{name: "nul", data: "a\n---\nb\x00c", err: "corpusFile.txt: sample 2 (line 3) holds a NUL byte (byte 1 of the sample): binary input"},
		{name: "latin1", data: "ok\n---\ncaf\xe9\n", err: "corpusFile.txt: sample 2 (line 3) is not valid UTF-8 (first bad byte at offset 3"},
		{name: "jsonl", data: "{\"text\": \"a\\nb\"}\n\n{\"text\":\"c\",\"id\":3}\n", jsonl: true, want: []string{"a\nb", "c"}, lines: []int{1, 3}},
		{name: "jsonl no text", data: "{\"text\":\"a\"}\n{\"body\":\"c\"}\n", jsonl: true, err: "corpusFile.txt: sample 2 (line 2): no string field \"text\""},
		{name: "jsonl text not string", data: "{\"text\":3}\n", jsonl: true, err: "sample 1 (line 1): invalid JSON"},
		{name: "jsonl bad json", data: "{\"text\":\"a\"\n", jsonl: true, err: "sample 1 (line 1): invalid JSON"},
		{name: "jsonl empty text", data: "{\"text\":\" \\n\"}\n", jsonl: true, err: "sample 1 (line 1) is empty"},
		{name: "jsonl binary", data: "{\"text\":\"a\x00\"}\n", jsonl: true, err: "holds a NUL byte"},
		{name: "jsonl not utf8", data: "{\"text\":\"\xff\"}\n", jsonl: true, err: "is not valid UTF-8"},
		{name: "jsonl nothing", data: "\n\n", jsonl: true, err: "corpusFile.txt: no samples"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSamples([]byte(tc.data), "corpusFile.txt", tc.jsonl)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var texts []string
			for k, s := range got {
				texts = append(texts, s.Text)
				if s.Index != k+1 || s.File != "corpusFile.txt" {
					t.Errorf("sample %d: index %d file %q", k, s.Index, s.File)
				}
				if tc.lines != nil && s.Line != tc.lines[k] {
					t.Errorf("sample %d starts at line %d, want %d", k, s.Line, tc.lines[k])
				}
			}
			if !slices.Equal(texts, tc.want) {
				t.Errorf("samples %q, want %q", texts, tc.want)
			}
		})
	}
}

func FuzzParseSamples(f *testing.F) {
	f.Add([]byte("a\nb\n---\nc\n"), false)
	f.Add([]byte("a\r\n---\r\n\r\nc"), false)
	f.Add([]byte("---\n---\n"), false)
	f.Add([]byte("x\x00y"), false)
	f.Add([]byte("{\"text\":\"a\"}\n{\"text\":\"b\\u0000\"}\n"), true)
	f.Add([]byte("{\"text\":\"\xc3\"}"), true)
	f.Fuzz(func(t *testing.T, data []byte, jsonl bool) {
		got, err := ParseSamples(data, "f", jsonl)
		if err != nil {
			return
		}
		if len(got) == 0 {
			t.Fatal("no samples and no error")
		}
		for _, s := range got {
			if strings.TrimSpace(s.Text) == "" || !utf8.ValidString(s.Text) {
				t.Fatalf("sample %d accepted: %q", s.Index, s.Text)
			}
		}
		if jsonl || strings.ContainsRune(string(data), '\r') {
			return
		}
		// text form: joining the samples with separators reads back the same
		var parts []string
		for _, s := range got {
			parts = append(parts, s.Text)
		}
		again, err := ParseSamples([]byte(strings.Join(parts, "\n---\n")+"\n"), "f", false)
		if err != nil {
			t.Fatalf("re-joined samples fail: %v", err)
		}
		for k := range again {
			if again[k].Text != parts[k] {
				t.Fatalf("sample %d reads back as %q, was %q", k+1, again[k].Text, parts[k])
			}
		}
	})
}

func TestSelect(t *testing.T) {
	var texts []Text
	for k := range 10 {
		texts = append(texts, Text{Index: k + 1})
	}
	a, b := Select(texts, 4, 7), Select(texts, 4, 7)
	if len(a) != 4 || !slices.Equal(a, b) {
		t.Fatalf("Select not deterministic: %v vs %v", a, b)
	}
	if !slices.IsSortedFunc(a, func(x, y Text) int { return x.Index - y.Index }) {
		t.Errorf("Select lost the file order: %v", a)
	}
	if c := Select(texts, 4, 8); slices.Equal(a, c) {
		t.Errorf("seeds 7 and 8 picked the same samples %v", a)
	}
	if len(Select(texts, 0, 1)) != 10 || len(Select(texts, 20, 1)) != 10 {
		t.Error("max 0 or >= len must keep every sample")
	}
}

// endless yields n bytes of "a" with no newline: a 50 MB one-line sample
// that is never in memory.
type endless struct{ n int }

func (e *endless) Read(p []byte) (int, error) {
	if e.n == 0 {
		return 0, io.EOF
	}
	k := min(len(p), e.n)
	for i := range p[:k] {
		p[i] = 'a'
	}
	e.n -= k
	return k, nil
}

// TestHugeSampleBoundedMemory: a 50 MB single-line sample is refused with
// its size, and reading it allocates about one sample cap, not 50 MB.
func TestHugeSampleBoundedMemory(t *testing.T) {
	for _, jsonl := range []bool{false, true} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var r io.Reader = &endless{n: 50 << 20}
		if jsonl {
			r = io.MultiReader(strings.NewReader(`{"text": "`), r, strings.NewReader("\"}\n"))
		}
		err := readSamples(r, "big.txt", jsonl, MaxSampleBytes, func(Text) error { return nil })
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), "big.txt: sample 1 (line 1)") || !strings.Contains(err.Error(), "50.0 MiB") {
			t.Errorf("jsonl %v: %v", jsonl, err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 24<<20 {
			t.Errorf("jsonl %v: reading a 50 MB sample allocated %d MB", jsonl, alloc>>20)
		}
	}
	// Just under the cap is accepted.
	ok := strings.Repeat("b", MaxSampleBytes)
	if got, err := ParseSamples([]byte(ok+"\n---\nc\n"), "f", false); err != nil || len(got) != 2 || len(got[0].Text) != MaxSampleBytes {
		t.Errorf("a sample at the cap: %v", err)
	}
	if _, err := ParseSamples([]byte(ok+"bb\n"), "f", false); err == nil || !strings.Contains(err.Error(), "longer than the 1.0 MiB") {
		t.Errorf("a sample over the cap: %v", err)
	}
}
