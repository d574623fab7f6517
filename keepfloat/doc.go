// Package keepfloat chooses the linears a quantized build keeps in float
// (--keep-float N) by their measured cost: on calibration text, each unit
// (q_k_v_proj, o_proj, gate_proj with up_proj, down_proj of a layer) is
// quantized alone, as the target format's runtime would run it (its weight
// grid rounded to nearest, its activation rule), and the KL divergence of
// the model's next-token distribution from the float model's is measured.
// The N units with the largest divergence are kept. The measurement runs
// the float forward once, keeping every layer's input, and then, per unit,
// only the layers from the unit's own on.
package keepfloat
