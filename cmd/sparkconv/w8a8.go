package main

import (
	"github.com/spf13/cobra"

	"sparkconv/convert"
)

func init() {
	var cf convertFlags
	var kf calibFlags
	var keep keepFlags
	cmd := &cobra.Command{
		Use:   "w8a8 --model DIR --out DIR [--samples FILE] [--tokens N] [--damp F] [--act-order] [--smooth ALPHA] [--rtn] [--keep-float N]",
		Short: "Write a compressed-tensors W8A8 int8 checkpoint (per-channel weights) for vLLM",
		Long: `Quantizes the 5 linears of every layer to int8, symmetric per output channel
(scale = amax/127.5), with int8 per-token dynamic activations
declared for vLLM's CompressedTensorsW8A8Int8. g_proj and lm_head stay in the
input dtype; everything else is copied bit for bit. The scales come from
the original weights, the codes from GPTQ.

--smooth ALPHA applies SmoothQuant first, as llm-compressor's W8A8 recipe
does (SmoothQuantModifier(smoothing_strength=0.8) then GPTQ): per input
channel s = max|X|^alpha / max|W|^(1-alpha) of the norms' outputs, folded into
input_layernorm and post_attention_layernorm (written divided by s) and the
weights of every linear reading them (multiplied by s), g_proj included (it
reads the same input as q_k_v_proj; it stays float). The output is still a
plain compressed-tensors checkpoint that vLLM loads unchanged.

--keep-float N keeps N linear units in the input dtype, named in the
config's ignore list: each unit (q_k_v_proj, o_proj, gate_proj with
up_proj, down_proj of a layer) is quantized alone (int8 weights rounded to
nearest, int8 per-token inputs) on --keep-float-tokens tokens of the
calibration text, and the N with the largest KL divergence from the float
model are kept. config.json's sparkconv_keep_float records them with
their measured cost.` + calibHelp,
		Example: "  sparkconv w8a8 --model /tmp/spark-tiny --out /tmp/spark-tiny-w8a8",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if kf.c.Smooth > 0 && (keep.n > 0 || len(keep.modules) > 0) {
				return usagef("--smooth with --keep-float: a kept q_k_v_proj leaves its layer's input norm unsmoothed, so the config's smoothquant_alpha would not say what was done; rotate's --smooth-down combines with --keep-float")
			}
			return cf.runCalibrated(cmd, &kf, convert.W8A8{}, &keep, func(r *convert.Report, out string) error {
				if err := printReport(cmd, r, out); err != nil {
					return err
				}
				if !jsonOut && r.Calibration != nil {
					printHeldOut(cmd, r)
				}
				return nil
			})
		},
	}
	cf.register(cmd)
	kf.register(cmd, false, 0)
	kf.registerSmooth(cmd)
	keep.register(cmd)
	rootCmd.AddCommand(cmd)
}
