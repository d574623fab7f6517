package onnxgraph_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	. "sparkconv/onnxgraph"
	"sparkconv/ortrun"
	"sparkconv/ortrun/orttest"
	"sparkconv/spark"
	"sparkconv/synthetic"
)

var (
	smallOnce       sync.Once
	smallFixtureDir string
	smallErr        error
)

// smallFixture generates the "small" fixture (8 layers, hidden 512, vocab
// 2048: 54 MB of bf16) once per test binary.
func smallFixture(b *testing.B) string {
	smallOnce.Do(func() {
		dir, err := os.MkdirTemp("", "onnxgraph-bench-")
		if err != nil {
			smallErr = err
			return
		}
		smallFixtureDir = filepath.Join(dir, "small")
		if smallErr = os.Mkdir(smallFixtureDir, 0o755); smallErr == nil {
			smallErr = synthetic.Generate(smallFixtureDir, synthetic.Options{Preset: "small", Seed: 1})
		}
	})
	if smallErr != nil {
		b.Fatal(smallErr)
	}
	return smallFixtureDir
}

// cpuSeconds is the process's user + system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func exportBytes(b *testing.B, man *Manifest) int64 {
	var n int64
	for _, g := range man.Graphs {
		n += g.Bytes
	}
	return n
}

// BenchmarkExport reports the export's output rate in MB/s (bytes of .onnx
// written, bf16 read, converted, transposed, hashed and fsynced).
func BenchmarkExport(b *testing.B) {
	model := smallFixture(b)
	m, err := spark.Open(model)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	for _, c := range []struct {
		name string
		o    ExportOptions
	}{{"fp32", ExportOptions{}}, {"fp16", ExportOptions{DType: Float16}}} {
		b.Run(c.name, func(b *testing.B) {
			var total int64
			cpu0 := cpuSeconds()
			for b.Loop() {
				dir := b.TempDir()
				man, err := Export(context.Background(), m, dir, c.o)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(exportBytes(b, man))
				total += exportBytes(b, man)
				b.StopTimer()
				os.RemoveAll(dir)
				b.StartTimer()
			}
			// The wall rate is bound by fsync to this machine's disk
			// (~100 MB/s measured with dd); per CPU-second is the stable one.
			b.ReportMetric(float64(total)/1e6/(cpuSeconds()-cpu0), "MB/cpu-s")
		})
	}
}

// BenchmarkRunnerStep is one decode step of the small fixture through
// ONNX Runtime (embed, 8 layer graphs, head), one thread: tokens/s.
func BenchmarkRunnerStep(b *testing.B) {
	orttest.Init(b)
	model := smallFixture(b)
	m, err := spark.Open(model)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if _, err := Export(context.Background(), m, dir, ExportOptions{Context: 256}); err != nil {
		b.Fatal(err)
	}
	m.Close()
	r, err := ortrun.OpenRunner(dir, ortrun.RunnerOptions{SessionOptions: ortrun.SessionOptions{Threads: 1}})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	p := 0
	for b.Loop() {
		if _, err := r.Step(int64(p%2000), p%255); err != nil {
			b.Fatal(err)
		}
		p++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}
