package tokenizer

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkEncode reports MB/s of input text for each reference tokenizer
// over all public golden texts. The BPE cache is warm after the first
// iteration, as in long-running use.
func BenchmarkEncode(b *testing.B) {
	texts, total := benchTexts(b)
	for _, name := range goldenNames {
		b.Run(name, func(b *testing.B) {
			tk := loadGolden(b, name)
			b.SetBytes(int64(total))
			b.ReportAllocs()
			tokens := 0
			cpu0 := processCPUSeconds()
			for b.Loop() {
				tokens = 0
				for _, s := range texts {
					ids, err := tk.Encode(s, false)
					if err != nil {
						b.Fatal(err)
					}
					tokens += len(ids)
				}
			}
			reportCPU(b, cpu0, total)
			b.ReportMetric(float64(tokens)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkEncodeCold measures encoding with an empty BPE cache each time
// (a fresh tokenizer per iteration is too slow to load, so the cache is
// cleared instead).
func BenchmarkEncodeCold(b *testing.B) {
	texts, total := benchTexts(b)
	for _, name := range goldenNames {
		b.Run(name, func(b *testing.B) {
			tk := loadGolden(b, name)
			b.SetBytes(int64(total))
			cpu0 := processCPUSeconds()
			for b.Loop() {
				m := tk.model.(*bpe)
				m.cacheMu.Lock()
				clear(m.cache)
				clear(m.rawCache)
				m.cacheMu.Unlock()
				for _, s := range texts {
					if _, err := tk.Encode(s, false); err != nil {
						b.Fatal(err)
					}
				}
			}
			reportCPU(b, cpu0, total)
		})
	}
}

// BenchmarkDecode reports MB/s of decoded text.
func BenchmarkDecode(b *testing.B) {
	texts := goldenTexts(b)
	for _, name := range goldenNames {
		b.Run(name, func(b *testing.B) {
			tk := loadGolden(b, name)
			var all [][]int
			total := 0
			for _, s := range texts {
				ids, err := tk.Encode(s, false)
				if err != nil {
					b.Fatal(err)
				}
				all = append(all, ids)
				total += len(s)
			}
			b.SetBytes(int64(total))
			cpu0 := processCPUSeconds()
			for b.Loop() {
				for _, ids := range all {
					_ = tk.Decode(ids, false)
				}
			}
			reportCPU(b, cpu0, total)
		})
	}
}

// BenchmarkLoad reports how long parsing each tokenizer.json takes
// (SetBytes makes MB/s the JSON parse rate).
func BenchmarkLoad(b *testing.B) {
	for _, name := range goldenNames {
		b.Run(name, func(b *testing.B) {
			data, err := os.ReadFile(filepath.Join(sharedDir(b), "tokenizers", name, "tokenizer.json"))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
			cpu0 := processCPUSeconds()
			for b.Loop() {
				if _, err := Parse(data); err != nil {
					b.Fatal(err)
				}
			}
			if cpu := processCPUSeconds() - cpu0; cpu > 0 {
				b.ReportMetric(cpu/float64(b.N)*1e3, "cpu-ms/load")
			}
		})
	}
}

// benchTexts returns the public golden texts and their total size in
// bytes (the bytes per op of the encode benchmarks).
func benchTexts(b *testing.B) (texts []string, total int) {
	texts = goldenTexts(b)
	for _, s := range texts {
		total += len(s)
	}
	return texts, total
}

// reportCPU adds MB of text per CPU-second (all threads, GC included): on
// a shared machine it is steadier than the wall-clock MB/s.
func reportCPU(b *testing.B, cpu0 float64, bytesPerOp int) {
	if cpu := processCPUSeconds() - cpu0; cpu > 0 {
		b.ReportMetric(float64(bytesPerOp)*float64(b.N)/cpu/1e6, "MB/cpu-s")
	}
}
