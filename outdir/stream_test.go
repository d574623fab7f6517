package outdir

import (
	"bytes"
	"crypto/sha256"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestStream writes pieces of random sizes through a Stream, direct and
// buffered, with and without a hash, for totals on and off the O_DIRECT
// alignment and on a chunk boundary, and checks the file and the hash.
func TestStream(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, total := range []int{0, 1, 4095, 4096, streamChunk, streamChunk + 1, 3*streamChunk + 12345} {
		data := make([]byte, total)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		for _, direct := range []bool{true, false} {
			for _, hashed := range []bool{true, false} {
				path := filepath.Join(t.TempDir(), "f")
				f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				h := sha256.New()
				var s *Stream
				if hashed {
					s = newStream(f, h, direct)
				} else {
					s = newStream(f, nil, direct)
				}
				for rest := data; len(rest) > 0; {
					n := min(len(rest), 1+r.IntN(3*streamChunk/2))
					if r.IntN(4) == 0 {
						n = min(len(rest), 1+r.IntN(100))
					}
					if k, err := s.Write(rest[:n]); k != n || err != nil {
						t.Fatalf("write %d: %d, %v", n, k, err)
					}
					rest = rest[n:]
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				f.Close()
				got, _ := os.ReadFile(path)
				if !bytes.Equal(got, data) || s.Size() != int64(total) {
					t.Fatalf("total %d direct %v: file differs (%d bytes, size %d)", total, direct, len(got), s.Size())
				}
				if want := sha256.Sum256(data); hashed && !bytes.Equal(h.Sum(nil), want[:]) {
					t.Fatalf("total %d direct %v: hash differs", total, direct)
				}
				if _, err := s.Write([]byte{1}); err == nil {
					t.Fatal("write after close accepted")
				}
			}
		}
	}
}
