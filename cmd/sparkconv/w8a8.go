package main

import (
	"github.com/spf13/cobra"

	"sparkconv/convert"
)

func init() {
	var cf convertFlags
	cmd := &cobra.Command{
		Use:   "w8a8 --model DIR --out DIR",
		Short: "Write a compressed-tensors W8A8 int8 checkpoint (per-channel weights) for vLLM",
		Long: `Quantizes the 5 linears of every layer to int8, symmetric per output channel
(scale = amax/127.5, round to nearest), with int8 per-token dynamic activations
declared for vLLM's CompressedTensorsW8A8Int8. g_proj and lm_head stay in the
input dtype; everything else is copied bit for bit.`,
		Example: "  sparkconv w8a8 --model /tmp/spark-tiny --out /tmp/spark-tiny-w8a8",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opt, err := cf.options()
			if err != nil {
				return err
			}
			if err := cf.gate.check(cmd); err != nil {
				return err
			}
			r, err := convert.W8A8(cmd.Context(), convert.W8A8Options{Options: opt})
			if err != nil {
				return err
			}
			verdict, err := cf.gate.evaluate(cmd, r, opt.Model, opt.Out)
			if err != nil {
				return err
			}
			if err := printReport(cmd, r, opt.Out); err != nil {
				return err
			}
			return verdict
		},
	}
	cf.register(cmd)
	rootCmd.AddCommand(cmd)
}
