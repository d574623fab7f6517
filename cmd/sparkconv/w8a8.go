package main

import (
	"github.com/spf13/cobra"

	"sparkconv/convert"
)

func init() {
	var cf convertFlags
	var kf calibFlags
	cmd := &cobra.Command{
		Use:   "w8a8 --model DIR --out DIR [--samples FILE] [--tokens N] [--damp F] [--act-order] [--smooth ALPHA] [--rtn]",
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
plain compressed-tensors checkpoint that vLLM loads unchanged.` + calibHelp,
		Example: "  sparkconv w8a8 --model /tmp/spark-tiny --out /tmp/spark-tiny-w8a8",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opt, err := cf.begin(cmd, kf.c.Files...)
			if err != nil {
				return err
			}
			solver, err := kf.solver(cmd)
			if err != nil {
				return err
			}
			r, err := convert.W8A8With(cmd.Context(), convert.W8A8Options{Options: opt, Solver: solver})
			if err != nil {
				return err
			}
			return cf.finish(cmd, r, func() error {
				if err := printReport(cmd, r, opt.Out); err != nil {
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
	kf.register(cmd, false)
	kf.registerSmooth(cmd)
	rootCmd.AddCommand(cmd)
}
