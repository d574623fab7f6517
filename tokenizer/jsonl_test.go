package tokenizer

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestEncodeJSONL(t *testing.T) {
	tk, _ := tinyTokenizer(t)
	hello, _ := tk.Encode("hello", false)
	empty, _ := tk.Encode("", false)
	im, _ := tk.Encode("<|im_end|>", false)
	line := func(ids []int) string { return string(appendIDsJSON(nil, ids)) }
	cases := []struct {
		name, in, want, err string
		lines               int
	}{
		{"two lines", "{\"text\": \"hello\"}\n{\"text\": \"\"}\n", line(hello) + line(empty), "", 2},
		{"crlf and no final newline", "{\"text\": \"hello\"}\r\n{\"text\": \"<|im_end|>\"}", line(hello) + line(im), "", 2},
		{"extra fields", `{"id": 7, "text": "hello"}` + "\n", line(hello), "", 1},
		{"empty input", "", "", "", 0},
		{"bad json", "{\"text\": \"hello\"}\n{\"text\": \n", line(hello), "line 2:", 1},
		{"blank line", "{\"text\": \"hello\"}\n\n{\"text\": \"hello\"}\n", line(hello), "line 2:", 1},
		{"no text", "{\"txt\": \"hello\"}\n", "", "line 1: no \"text\"", 0},
		{"text not a string", "{\"text\": 3}\n", "", "line 1:", 0},
		{"null text", "{\"text\": null}\n", "", "line 1: no \"text\"", 0},
		{"line over 16 MiB", "{\"text\": \"hello\"}\n{\"text\": \"" + strings.Repeat("a", 16<<20) + "\"}\n", line(hello), "line 2: line longer than 16777216 bytes (16 MiB)", 1},
	}
	for _, c := range cases {
		var out bytes.Buffer
		n, err := tk.EncodeJSONL(context.Background(), strings.NewReader(c.in), &out, false)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
		}
		if n != c.lines || out.String() != c.want {
			t.Errorf("%s: %d lines %q, want %d lines %q", c.name, n, out.String(), c.lines, c.want)
		}
	}
}

func TestEncodeJSONLCanceled(t *testing.T) {
	tk, _ := tinyTokenizer(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := tk.EncodeJSONL(ctx, strings.NewReader("{\"text\": \"a\"}\n"), &bytes.Buffer{}, false)
	if err == nil {
		t.Fatal("canceled context not reported")
	}
}

// TestConcurrentEncode runs one tokenizer from several goroutines (the
// BPE cache is shared); results must equal the sequential ones. Run with
// -race to check the locking.
func TestConcurrentEncode(t *testing.T) {
	tk, _ := tinyTokenizer(t)
	texts := strings.Split(tinyCorpus+tinyCorpus, "\n")
	want := make([][]int, len(texts))
	for i, s := range texts {
		want[i], _ = tk.Encode(s, false)
	}
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		go func() {
			for i := len(texts) - 1; i >= 0; i-- {
				got, err := tk.Encode(texts[i], false)
				if err != nil || !slices.Equal(got, want[i]) {
					errs <- texts[i]
					return
				}
			}
			errs <- ""
		}()
	}
	for g := 0; g < 8; g++ {
		if s := <-errs; s != "" {
			t.Errorf("concurrent encode of %q differs", s)
		}
	}
}

// TestLoadSniffsGarbage: a large file that is not a JSON object is refused
// after one small read, not read whole first (a 500 MB file of random
// bytes once cost 1.24 GB resident before its error).
func TestLoadSniffsGarbage(t *testing.T) {
	p := t.TempDir() + "/tokenizer.json"
	f, _ := os.Create(p)
	f.Write([]byte("\x89garbage"))
	f.Truncate(256 << 20) // sparse: no disk, 256 MiB stated
	f.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Load(p)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "json at byte 0: want an object") {
		t.Fatalf("garbage tokenizer: %v", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("refusing it allocated %d bytes", grew)
	}
}
