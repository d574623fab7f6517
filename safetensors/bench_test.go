package safetensors

import (
	"fmt"
	"testing"

	"sparkconv/dtype"
)

// benchCheckpoint writes a checkpoint of 8 bf16 tensors of 8 MiB each.
func benchCheckpoint(b *testing.B) (string, int64) {
	b.Helper()
	dir := b.TempDir()
	var tensors []Tensor
	payload := make([]byte, 8<<20)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	for i := range 8 {
		tensors = append(tensors, Tensor{Name: fmt.Sprintf("t%d", i), DType: dtype.BF16, Shape: []int64{2048, 2048},
			Produce: func() ([]byte, error) { return payload, nil }})
	}
	if _, err := WriteCheckpoint(dir, tensors, WriteOptions{Shards: 2}); err != nil {
		b.Fatal(err)
	}
	return dir, int64(len(tensors) * len(payload))
}

// BenchmarkReadFloat32 opens a sharded checkpoint and decodes every tensor
// from bf16 to float32 (the page cache holds the files): MB/s of bf16 input.
func BenchmarkReadFloat32(b *testing.B) {
	dir, total := benchCheckpoint(b)
	b.SetBytes(total)
	for b.Loop() {
		c, err := OpenDir(dir)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range c.Names() {
			if _, _, err := c.Float32(n); err != nil {
				b.Fatal(err)
			}
		}
		c.Close()
	}
}

// BenchmarkWrite streams tensors into a sharded checkpoint (to the page
// cache; includes fsync): MB/s written.
func BenchmarkWrite(b *testing.B) {
	payload := make([]byte, 8<<20)
	b.SetBytes(8 * int64(len(payload)))
	for b.Loop() {
		var tensors []Tensor
		for i := range 8 {
			tensors = append(tensors, Tensor{Name: fmt.Sprintf("t%d", i), DType: dtype.BF16, Shape: []int64{2048, 2048},
				Produce: func() ([]byte, error) { return payload, nil }})
		}
		if _, err := WriteCheckpoint(b.TempDir(), tensors, WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
