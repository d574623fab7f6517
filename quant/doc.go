// Package quant owns the numerics of sparkconv's weight quantization, as pure
// functions over float32 (or raw bf16) slices, with no file I/O.
//
// It keeps three concerns apart so that every writer (compressed-tensors W8A8,
// GPTQ-format W4A8, tinygemm W4A16) and the Hessian-based GPTQ algorithm share
// one implementation of each:
//
//   - GRIDS map a value to a code and back, given one group's parameters:
//     Int8 (w = q*scale, q in -128..127), Sym4 (w = (q-8)*scale, q in 0..15)
//     and Asym4 (tinygemm: w = (q-8)*scale + zero, q in 0..15). Codes are the
//     nearest grid point, rounding half to even as torch.round does.
//   - PARAMETER CHOICE picks a group's parameters: the plain rules (absmax,
//     min/max) and a squared-error search over shrunk ranges that always
//     evaluates the plain rule too, so it is never worse than it.
//   - PACKERS lay codes out as the checkpoint formats store them: GPTQ v1
//     qweight/qzeros/scales/g_idx, tinygemm's portable [N, K/2] bytes and the
//     AVX-512 / AVX2 kernel layouts of torch's _convert_weight_to_int4pack_for_cpu,
//     with the matching unpackers.
//
// Parameters are rounded to their storage dtype (ScaleDType) before codes are
// chosen, so a consumer that dequantizes the stored bytes gets exactly the
// values whose error this package reports. Weight matrices are W[N,K] row-major
// (N = out features, K = in features); groups run along K. Metrics (SNR in dB,
// max abs error) are summed in float32 blocks of 16 values and float64
// totals, in a fixed order, so results are identical from run to run
// whatever the number of goroutines; every
// decision-relevant product is explicitly rounded, so FMA fusion (GOAMD64=v3,
// arm64) cannot change the codes either.
//
// SmoothQuant's per-channel scale rule (SmoothScales, with ColumnAbsMax and
// ScaleColumns) lives here too: every smoothing takes its scales from it.
//
// Non-finite weights are rejected by the whole-matrix entry points; the
// group-level functions assume finite input.
package quant
