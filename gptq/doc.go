// Package gptq owns the GPTQ algorithm (Frantar et al., the blocked solve
// of IST-DASLab's gptq.py, docs/calibration.md#the-solve) on sparkconv's own kernels, and
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
//   - refine.go: the refit after a solve, on the loss the solve minimises:
//     each sweep revisits every code given the others (coordinate
//     descent) and then fits every group's parameters by least squares;
//   - floattarget.go: the float target (GPTAQ's asymmetric calibration):
//     the float model's stream beside the quantized one, and the target
//     W + A W C H^-1 each layer linear is solved toward;
//   - phase.go: pprof labels that split a conversion's CPU profile by
//     phase;
//   - sequential.go: the calibration inside a conversion, true-sequential
//     (GPTQModel's default): layer by layer, the layer's input comes from
//     the already-quantized layers before it, and inside a layer stage by
//     stage (forward.Stages) over every chunk: the input norm's Hessian ->
//     q_k_v_proj solved; attention with the quantized q_k_v_proj (g_proj
//     stays float) -> o_proj; o_proj and the residual, post norm ->
//     gate_proj and up_proj; GEGLU with the quantized gate/up -> down_proj;
//     down_proj and the residual are the next layer's input. Each linear
//     is solved on the input its quantized predecessors produce, in one
//     pass of the forward per layer. The head's Hessian comes from the
//     final norm's output;
//   - store.go: the solved codes, kept in a scratch file of the output
//     folder until the checkpoint writer asks for them (it orders tensors by
//     dtype and name, not by layer), served through convert's chooser
//     interfaces.
//
// The checkpoint formats themselves are package convert's.
package gptq
