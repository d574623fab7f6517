package evalort

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"sparkconv/fixtures/fixturestest"
	"sparkconv/forward"
	"sparkconv/onnxgraph"
	"sparkconv/onnxgraph/exporttest"
	"sparkconv/ortrun/orttest"
	"sparkconv/quant"
)

// BenchmarkTTFT measures ONNX Runtime's time to first token for a prompt
// of $SPARKCONV_TTFT_TOKENS (default 2048) random tokens on the export in
// $SPARKCONV_TTFT_EXPORT (made with --prefill and a --context that holds
// the prompt), in the same run: through the prefill graphs in chunks, and
// token by token through the decode step. Only the graphs' Run calls are
// timed (a runtime holds every graph loaded); the two first-token logits
// must agree. Skipped without the variable:
//
//	SPARKCONV_TTFT_EXPORT=DIR go test ./eval/evalort -run XXX -bench TTFT -benchtime 1x -timeout 3h
func BenchmarkTTFT(b *testing.B) {
	dir := os.Getenv("SPARKCONV_TTFT_EXPORT")
	if dir == "" {
		b.Skip("set SPARKCONV_TTFT_EXPORT to an export with prefill graphs")
	}
	n := 2048
	if s := os.Getenv("SPARKCONV_TTFT_TOKENS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			b.Fatalf("SPARKCONV_TTFT_TOKENS=%q: want a positive integer", s)
		}
	}
	orttest.Init(b)
	e, err := Open(dir, 0, "")
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	if !e.UsePrefill(true) {
		b.Fatalf("%s has no prefill graphs", dir)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ids := make([]int, n)
	for i := range ids {
		ids[i] = rng.IntN(e.Vocab())
	}
	var pre, tok float64
	for b.Loop() {
		e.UsePrefill(true)
		t0 := e.RunTime()
		lp, err := e.Prompt(ids)
		if err != nil {
			b.Fatal(err)
		}
		t1 := e.RunTime()
		e.UsePrefill(false)
		lt, err := e.Prompt(ids)
		if err != nil {
			b.Fatal(err)
		}
		pre, tok = (t1 - t0).Seconds(), (e.RunTime() - t1).Seconds()
		snr := quant.Compare(lt, lp).SNRdB()
		b.Logf("%d tokens: prefill %.2f s, token by token %.2f s (%.1fx); first-token logits agree at %.1f dB", n, pre, tok, tok/pre, snr)
		if snr < 60 {
			b.Errorf("prefill and token-by-token first-token logits differ: %.1f dB", snr)
		}
	}
	b.ReportMetric(pre, "prefill_s")
	b.ReportMetric(tok, "token_by_token_s")
	b.ReportMetric(tok/pre, "speedup")
}

// TestPrompt: a prompt answered through the prefill graphs (three chunks,
// the last padded) gives the first token's logits the decode step gives
// token by token and the reference forward gives, in float32.
func TestPrompt(t *testing.T) {
	orttest.Init(t)
	dir := fixturestest.Tiny(t, false)
	exp := exporttest.Export(t, dir, onnxgraph.ExportOptions{Context: 64, Prefill: 12})
	e, err := Open(exp, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ids := make([]int, 31)
	for i := range ids {
		ids[i] = (i*37 + 5) % e.Vocab()
	}
	ref, err := forward.Open(dir, forward.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	res, err := ref.Prefill(ids, forward.PrefillOptions{Logits: forward.LastLogits})
	if err != nil {
		t.Fatal(err)
	}
	for _, on := range []bool{true, false} {
		e.UsePrefill(on)
		before := e.RunTime()
		got, err := e.Prompt(ids)
		if err != nil {
			t.Fatal(err)
		}
		if snr := quant.Compare(res.Logits, got).SNRdB(); snr < 100 || e.RunTime() <= before {
			t.Errorf("prefill %v: first-token logits %.1f dB against the reference (run time %v)", on, snr, e.RunTime()-before)
		}
	}
	if _, err := e.Prompt(make([]int, 65)); err == nil {
		t.Error("a prompt past the context was accepted")
	}
}
