// Package forward is the float32 reference forward of Spark-X2.5, exactly
// as docs/model.md#one-layer states it: bf16 weights are widened to float32
// exactly (inside the kernels) and every activation is float32 (reductions
// of RMSNorm and softmax, GELU, sigmoid and the RoPE angles in float64).
//
// It owns:
//   - prefill over a token sequence (Model.Prefill), giving the logits at
//     every position and, on request, every layer's input, post-RoPE keys,
//     values, the last residual and the final norm: the tensors of
//     testdata/golden/*/expected.safetensors, under the same names
//     (Result.Tensors);
//   - one layer of the prefill on its own (Model.ForwardLayer), with an
//     Observer that sees every intermediate tensor: calibration runs a corpus
//     through the model layer by layer with it; and the same layer as six
//     Stages (input norm, attention, o_proj, post norm, GEGLU, down_proj)
//     that ForwardLayer composes, for a caller that runs one stage over
//     every chunk before the next (GPTQ's true-sequential calibration);
//   - the decode step of the ONNX export contract
//     (docs/formats.md#onnx-decode-step): one token through one layer
//     against an explicit KV cache in the contract's layouts (Model.DecodeLayer, LayerCache with
//     Ring and Roll layouts), the RoPE inputs of a layer graph (Model.RoPE),
//     and a whole-model token-by-token Decoder on top;
//   - Compare, the SNR / max-error measure the tests and verifiers use.
//
// Weights are read from the memory-mapped checkpoint. bf16 linears and a
// bf16 head are multiplied in place (kernels.MatMulNTBF16: each value
// widened exactly inside the kernel, the same sums as a float32 copy);
// other weights (f16, f32, dequantized) are widened to float32 on first use.
// Layers are kept in a small cache (Options.CachedLayers): every layer for
// small models, two for the full-size one, so a full-size prefill streams
// layer by layer, dropping the mapped pages of evicted layers. The
// embedding is read row by row from its stored dtype, and the output head
// goes block by block (Options.HeadBlockRows), so neither is ever held as a
// whole float32 copy unless the model is small and not bf16.
//
// The GEMMs are kernels.MatMulNT(BF16) / MatMulNN / MatVecNT(BF16) (all
// cores).
// Attention runs per KV head and block of queries with the GQA query heads
// stacked as rows (the ONNX graph's reshape), so the 4 query heads of a KV
// head share one GEMM against its keys, and sliding layers only visit the
// keys inside the window.
//
// A Model is not safe for concurrent use.
package forward
