package tokenizer

import (
	"bytes"
	"context"
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
