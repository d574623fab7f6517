package main

import (
	"github.com/spf13/cobra"

	"sparkconv/convert"
)

func init() {
	var cf convertFlags
	var kf calibFlags
	var o convert.GPTQOptions
	cmd := &cobra.Command{
		Use:   "gptq --model DIR --out DIR [--group 128] [--quant-head] [--samples FILE] [--tokens N] [--damp F] [--act-order=false] [--rtn] [--no-search]",
		Short: "Write a GPTQ-format 4-bit checkpoint (W4A8 on vLLM's CPU int4_scaled_mm_cpu kernel)",
		Long: `Quantizes the 5 linears of every layer to 4 bits on GPTQ's symmetric grid
(w = (q - 8) * scale, one fp16 scale per group of --group input channels) and
writes them as GPTQ v1 tensors (qweight, qzeros = 0x77777777, scales, g_idx)
with quant_method "gptq", sym true, desc_act false: what vLLM's CPU path loads
and runs with int8 dynamic activations (W4A8) on AMX CPUs with bf16 models.

Group scales come from an MSE search over shrunk ranges (--no-search: plain
absmax). g_proj, the embeddings and the norms stay in the input dtype. --quant-head
also quantizes the output head (untied from the embedding, which stays for
the lookup): on CPU the bf16 head costs more per decode step than all the
4-bit layers save.

The model is checked first: vLLM's CPU path needs K and N multiples of 32 and
a group size that divides K; nothing is written for a model it cannot load.` + calibHelp,
		Example: "  sparkconv gptq --model /tmp/spark-tiny --out /tmp/spark-tiny-gptq --group 128 --quant-head\n  sparkconv gptq --model /tmp/spark-tiny --out /tmp/spark-tiny-gptq --samples my-text.txt --tokens 16384",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opt, err := cf.begin(cmd, kf.c.Files...)
			if err != nil {
				return err
			}
			o.Options = opt
			if err := o.CheckFlags(); err != nil {
				return usagef("%v", err)
			}
			if o.Solver, err = kf.solver(cmd); err != nil {
				return err
			}
			r, err := convert.GPTQ(cmd.Context(), o)
			if err != nil {
				return err
			}
			return cf.finish(cmd, r, func() error { return finish4bit(cmd, r, o.QuantHead, opt.Out) })
		},
	}
	cf.register(cmd)
	kf.register(cmd, true)
	f := cmd.Flags()
	f.IntVar(&o.Group, "group", 128, "group size along the input dimension: 32, 64 or 128")
	f.BoolVar(&o.QuantHead, "quant-head", false, "quantize the output head too (unties it; recommended on CPU)")
	f.BoolVar(&o.NoSearch, "no-search", false, "plain absmax scales instead of the per-group MSE scale search")
	oneOf(cmd, "group", "32", "64", "128")
	rootCmd.AddCommand(cmd)
}
