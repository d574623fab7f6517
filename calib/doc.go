// Package calib owns calibration: it runs real text through the float32
// reference forward (package forward) and records what quantizers and the
// QNN encodings need — per-channel statistics and Hessians of every linear
// layer's input, and the ranges of every intermediate tensor of every
// layer — in a folder that `sparkconv calibrate` writes atomically.
//
// # Samples
//
// A samples file is text with samples separated by lines holding only
// "---" (see ParseSamples), or, when its name ends in .jsonl, one JSON
// object per line with a string field "text". Empty samples, NUL bytes
// (binary input) and invalid UTF-8 are errors naming the file, the sample's
// 1-based index and its first line. --max-samples keeps a random subset
// (drawn with --seed, in file order). Each sample is tokenized with the model
// folder's tokenizer.json, with special tokens (as transformers'
// tokenizer(text)), and cut into chunks of at most --seq-len tokens: long
// samples are chunked, not truncated, and every chunk is its own sequence
// starting at position 0.
//
// # How it runs
//
// The corpus goes through the model layer by layer, as GPTQ does: the
// residual stream of every chunk is kept (tokens x hidden float32: 8 KiB a
// token for the real model), and each layer is loaded once, run over every
// chunk, its statistics written, and its float64 accumulators reused for
// the next layer. Peak memory is therefore the residual streams + one
// layer's float32 weights (0.2 GB for the real model) + one layer's float64
// Hessians (0.45 GB: 3 x 2048^2 + 6656^2 values) + the float32 copy of the
// largest Hessian being written (0.18 GB), not the 11 GB that all layers'
// Hessians would take. Measured on the full-size fixture (28 layers, 1.7 B
// parameters, 461 tokens): 1.06 GB peak RSS.
//
// # Output folder
//
//	summary.json           Summary: format "sparkconv-calibration", version 1,
//	                       the model's shape, seq_len / max_samples / seed,
//	                       the samples used (file, index, line, tokens,
//	                       chunks), totals, one entry per linear input
//	                       (InputInfo: tensor prefix, file, the forward point
//	                       it is, the modules that read it, channels, tokens,
//	                       absmax), per layer the Range {min, max, absmax} of
//	                       every forward.Point by name, and "head": the ranges
//	                       of final_norm and logits.
//	layer_NN.safetensors   the statistics of layer NN's four linear inputs.
//	head.safetensors       the statistics of the head's input (final_norm).
//
// Ranges (summary.json, layers[i].ranges, names of forward.Point): hidden_in
// (residual entering the layer; hidden_in of layer 0 is the embedding),
// attn_norm, q, k, v, q_rope, k_rope (the K cache), scores
// (q.k/sqrt(head_dim) over the keys each query may see, before softmax),
// probs (their softmax), attn, gate_logits, gate (sigmoid), attn_gated,
// attn_out, hidden_mid, mlp_norm, mlp_gate, mlp_gelu, mlp_up, mlp_act,
// mlp_out, hidden_out. Masked attention entries never count.
//
// Tensors of one linear input, named {prefix}.{stat}, all F32 except tokens:
//
//	{prefix}.absmax   [n]     max |x| per input channel
//	{prefix}.min      [n]     min x per channel
//	{prefix}.max      [n]     max x per channel
//	{prefix}.mean_sq  [n]     mean of x^2 per channel
//	{prefix}.hessian  [n, n]  sum over tokens of x x^T (X^T X), accumulated in
//	                          float64 and stored rounded to float32; not
//	                          divided by the token count
//	{prefix}.tokens   I64 [1] number of tokens summed
//
// The prefixes, per layer i (an activation read by two modules is stored once,
// under its first reader; StatsOf maps any module to its prefix):
//
//	model.layers.{i}.self_attn.q_k_v_proj.input  attn_norm: q_k_v_proj and g_proj
//	model.layers.{i}.self_attn.o_proj.input      attn_gated: o_proj
//	model.layers.{i}.mlp.gate_proj.input         mlp_norm: gate_proj and up_proj
//	model.layers.{i}.mlp.down_proj.input         mlp_act: down_proj
//	lm_head.input                                final_norm: the head (tied or not)
//
// Every file is written deterministically: the same model, samples and
// flags give byte-identical files.
package calib
