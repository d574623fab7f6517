package qnn

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"sparkconv/onnxio"
	"sparkconv/onnxpb"

	"google.golang.org/protobuf/proto"
)

// cpuTime is the process's user+system CPU time: on a shared machine
// "per CPU-second" figures are steadier than wall-clock ones.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// perCPU reports work/CPU-second measured since start.
func perCPU(b *testing.B, start time.Duration, work float64, unit string) {
	if cpu := (cpuTime() - start).Seconds(); cpu > 0 {
		b.ReportMetric(work/cpu, unit)
	}
}

// stackedLayers chains n clean decode layers into one graph (28 = the
// model's depth).
func stackedLayers(n int) *tb {
	b := newTB(17)
	x := b.in("hidden_in", tF32, 1, 1, 8)
	pk := b.in("past_key", tF32, 1, 2, 4, 3)
	pv := b.in("past_value", tF32, 1, 2, 3, 4)
	mask := b.in("attention_mask", tF32, 1, 1, 1, 3)
	for i := range n {
		x = b.layer(fmt.Sprintf("l%d_", i), x, pk, pv, mask)
	}
	b.opTo("hidden_out", "Identity", []string{x})
	b.out("hidden_out", tF32, 1, 1, 8)
	return b
}

// BenchmarkLint lints a 28-layer graph; reports nodes linted per second.
func BenchmarkLint(b *testing.B) {
	m := stackedLayers(28).m
	if fs := Lint(m); len(fs) != 0 {
		b.Fatal(fs)
	}
	nodes := len(m.Graph.Node)
	b.ResetTimer()
	cpu := cpuTime()
	for range b.N {
		Lint(m)
	}
	b.ReportMetric(float64(nodes*b.N)/b.Elapsed().Seconds(), "nodes/s")
	perCPU(b, cpu, float64(nodes*b.N), "nodes/cpu-s")
}

// BenchmarkSanitize sanitizes 28 dynamo-style blocks (3 rewrites each plus
// dead-node removal); reports input nodes per second.
func BenchmarkSanitize(b *testing.B) {
	base := dynamoModel()
	g := base.g
	one, inits, outs := len(g.Node), len(g.Initializer), len(g.Output)
	// Replicate the block 27 more times under fresh names.
	for k := 1; k < 28; k++ {
		rename := func(s string) string {
			if s == "" || s == "q" || s == "k" || s == "mask" {
				return s
			}
			return fmt.Sprintf("b%d_%s", k, s)
		}
		for _, n := range g.Node[:one] {
			c := proto.Clone(n).(*onnxpb.NodeProto)
			for i := range c.Input {
				c.Input[i] = rename(c.Input[i])
			}
			for i := range c.Output {
				c.Output[i] = rename(c.Output[i])
			}
			c.Name = proto.String(rename(c.GetName()))
			g.Node = append(g.Node, c)
		}
		for _, t := range g.Initializer[:inits] {
			c := proto.Clone(t).(*onnxpb.TensorProto)
			c.Name = proto.String(rename(c.GetName()))
			g.Initializer = append(g.Initializer, c)
		}
		for _, o := range g.Output[:outs] {
			c := proto.Clone(o).(*onnxpb.ValueInfoProto)
			c.Name = proto.String(rename(c.GetName()))
			g.Output = append(g.Output, c)
		}
	}
	nodes := len(g.Node)
	models := make([]*onnxpb.ModelProto, b.N)
	for i := range models {
		models[i] = proto.Clone(base.m).(*onnxpb.ModelProto)
	}
	b.ResetTimer()
	cpu := cpuTime()
	for i := range b.N {
		ch, err := Sanitize(models[i])
		if err != nil || len(ch) != 28*6 {
			b.Fatalf("%d changes, err %v", len(ch), err)
		}
	}
	b.ReportMetric(float64(nodes*b.N)/b.Elapsed().Seconds(), "nodes/s")
	perCPU(b, cpu, float64(nodes*b.N), "nodes/cpu-s")
}

// bigModel holds 16 initializers of 4 MiB each (64 MiB of weights).
func bigModel() *onnxpb.ModelProto {
	b := cleanLayer()
	for i := range 16 {
		raw := make([]byte, 4<<20)
		for j := range raw {
			raw[j] = byte(i + j)
		}
		b.g.Initializer = append(b.g.Initializer, &onnxpb.TensorProto{Name: proto.String(fmt.Sprintf("w%d", i)),
			Dims: []int64{1 << 20}, DataType: proto.Int32(int32(tF32)), RawData: raw})
	}
	return b.m
}

// BenchmarkEncodeModel streams a 64 MiB model; MB/s via SetBytes.
func BenchmarkEncodeModel(b *testing.B) {
	m := bigModel()
	b.SetBytes(int64(proto.Size(m)))
	cpu := cpuTime()
	for range b.N {
		if _, err := onnxio.Encode(io.Discard, onnxio.Model{Proto: m}); err != nil {
			b.Fatal(err)
		}
	}
	perCPU(b, cpu, float64(proto.Size(m))*float64(b.N)/1e6, "MB/cpu-s")
}

// BenchmarkMarshal is the reference: protobuf's one-buffer Marshal.
func BenchmarkMarshal(b *testing.B) {
	m := bigModel()
	b.SetBytes(int64(proto.Size(m)))
	cpu := cpuTime()
	for range b.N {
		if _, err := (proto.MarshalOptions{Deterministic: true}).Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
	perCPU(b, cpu, float64(proto.Size(m))*float64(b.N)/1e6, "MB/cpu-s")
}

// BenchmarkReadModelFile maps and parses a 64 MiB model file; MB/s.
func BenchmarkReadModelFile(b *testing.B) {
	path := filepath.Join(b.TempDir(), "big.onnx")
	info, err := onnxio.WriteFile(path, onnxio.Model{Proto: bigModel()}, onnxio.WriteOptions{})
	n := info.Size
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(n)
	b.ResetTimer()
	cpu := cpuTime()
	for range b.N {
		if _, err := onnxio.ReadModelFile(path); err != nil {
			b.Fatal(err)
		}
	}
	perCPU(b, cpu, float64(n)*float64(b.N)/1e6, "MB/cpu-s")
	os.Remove(path)
}
