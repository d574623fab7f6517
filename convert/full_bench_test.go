package convert

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"sparkconv/safetensors"
)

// The Full benchmarks run a whole round-to-nearest conversion of a
// full-size checkpoint (SPARKCONV_FULL=DIR, e.g. `sparkconv fixture --preset
// full`), for profiles (-cpuprofile) and the input MB/s; skipped without it.
// Outputs go to b.TempDir().
func benchFull(b *testing.B, run func(o Options) (*Report, error)) {
	in := os.Getenv("SPARKCONV_FULL")
	if in == "" {
		b.Skip("set SPARKCONV_FULL to a full-size fixture")
	}
	ck, err := safetensors.OpenDir(in)
	if err != nil {
		b.Fatal(err)
	}
	var size int64
	for _, n := range ck.Names() {
		t, _ := ck.Info(n)
		size += t.NumElements() * int64(t.DType.Size())
	}
	ck.Close()
	b.SetBytes(size)
	for i := 0; b.Loop(); i++ {
		out := filepath.Join(b.TempDir(), "out")
		if _, err := run(Options{Model: in, Out: out, Quiet: true}); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(out)
	}
}

func BenchmarkFullW8A8(b *testing.B) {
	benchFull(b, func(o Options) (*Report, error) { return Convert(context.Background(), o, W8A8{}, nil) })
}

func BenchmarkFullGPTQ(b *testing.B) {
	benchFull(b, func(o Options) (*Report, error) {
		return Convert(context.Background(), o, W4A8{Group: 128, QuantHead: true}, nil)
	})
}

func BenchmarkFullW4A16(b *testing.B) {
	benchFull(b, func(o Options) (*Report, error) {
		return Convert(context.Background(), o, W4A16{Group: 128, QuantHead: true}, nil)
	})
}
