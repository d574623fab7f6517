package tokenizer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// maxJSONLLine bounds one input line of EncodeJSONL. Encoding holds every
// pre-token of a line at once, about 40 bytes of memory per byte of text
// (a 50 MB line measured 2.1 GB resident), so the cap is what keeps a line
// within memory: 16 MiB, far above one real document, costs under 1 GB.
const maxJSONLLine = 16 << 20

// EncodeJSONL reads lines of the form {"text": "..."} from r and writes
// {"ids": [...]} lines to w, one per input line, in order. A line that is
// not a JSON object with a string "text" field stops the run with an error
// naming its 1-based line number. It returns the number of lines encoded.
//
// Lines encoded before an error are still written out.
func (t *Tokenizer) EncodeJSONL(ctx context.Context, r io.Reader, w io.Writer, addSpecial bool) (n int, err error) {
	br := bufio.NewReaderSize(r, 1<<20)
	bw := bufio.NewWriterSize(w, 1<<20)
	defer func() {
		if ferr := bw.Flush(); ferr != nil && err == nil {
			err = fmt.Errorf("write: %w", ferr)
		}
	}()
	var out []byte
	for {
		line, err := readLine(br)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return n, fmt.Errorf("line %d: %w", n+1, err)
		}
		if n%256 == 0 && ctx.Err() != nil {
			return n, ctx.Err()
		}
		var rec struct {
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			return n, fmt.Errorf("line %d: %w", n+1, err)
		}
		if rec.Text == nil {
			return n, fmt.Errorf("line %d: no \"text\" string field", n+1)
		}
		ids, err := t.Encode(*rec.Text, addSpecial)
		if err != nil {
			return n, fmt.Errorf("line %d: %w", n+1, err)
		}
		out = appendIDsJSON(out[:0], ids)
		if _, err := bw.Write(out); err != nil {
			return n, fmt.Errorf("write: %w", err)
		}
		n++
	}
	return n, nil
}

// readLine returns the next line without its "\n" (or "\r\n"); io.EOF
// when there are no more lines. A last line without "\n" still counts.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxJSONLLine {
			return nil, fmt.Errorf("line longer than %d bytes (16 MiB): split the text into several lines", maxJSONLLine)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if len(line) == 0 && err != nil {
			return nil, io.EOF
		}
		n := len(line)
		if n > 0 && line[n-1] == '\n' {
			n--
			if n > 0 && line[n-1] == '\r' {
				n--
			}
		}
		return line[:n], nil
	}
}

// appendIDsJSON appends `{"ids": [1, 2, 3]}` and a newline.
func appendIDsJSON(b []byte, ids []int) []byte {
	b = append(b, `{"ids": [`...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	return append(b, "]}\n"...)
}
