// Package gptq owns the GPTQ algorithm (Frantar et al., the blocked solve
// of IST-DASLab's gptq.py, formats.md 1.7) on sparkconv's own kernels, and
// the calibrated, layer-by-layer conversion that feeds it:
//
//   - hessian.go: one accumulator per distinct linear input (H = X^T X in
//     float64, every 10th token held out for the report), and Prepare: dead
//     channels, damping relative to the mean diagonal, static act-order,
//     the upper Cholesky factor of H^-1 (float64, rounded once to
//     float32), more damping when H is not positive definite;
//   - solve.go: the blocked solve in float32, row panel by row panel (rows
//     are independent given the factor), its updates float32 GEMMs but
//     inside 16-column sub-blocks, one for every grid: GPTQ's symmetric
//     int4, tinygemm's asymmetric int4 and per-channel int8 (grid.go);
//   - phase.go: pprof labels that split a conversion's CPU profile by
//     phase;
//   - sequential.go: the calibration inside a conversion. Layer by layer,
//     the layer's input comes from the already-quantized layers before it;
//     the layer runs once with its float weights to accumulate the Hessians
//     of its four distinct inputs, its five linears are solved, and it runs
//     again with the dequantized codes to produce the next layer's input.
//     The head's Hessian comes from the final norm's output;
//   - store.go: the solved codes, kept in a scratch file of the output
//     folder until the checkpoint writer asks for them (it orders tensors by
//     dtype and name, not by layer), served through convert's chooser
//     interfaces.
//
// The checkpoint formats themselves are package convert's.
package gptq
