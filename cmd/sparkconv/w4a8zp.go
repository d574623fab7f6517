package main

import (
	"github.com/spf13/cobra"

	"sparkconv/convert"
	"sparkconv/gptq"
)

func init() {
	var cf convertFlags
	var kf calibFlags
	var o convert.W4A8ZP
	var keep keepFlags
	cmd := &cobra.Command{
		Use:   "w4a8-zp --model DIR --out DIR [--group 64] [--quant-head] [--samples FILE] [--tokens N] [--damp F] [--act-order=false] [--rtn] [--no-search] [--keep-float N]",
		Short: "Write a compressed-tensors int4 checkpoint with zero points (W4A8 on vLLM's CPU AMX kernel, W4A16 elsewhere)",
		Long: `Quantizes the 5 linears of every layer to 4 bits on the asymmetric grid with
an integer zero point per group (w = (q - z) * scale, q and z in 0..15, the
scale in the model's dtype, one per group of --group input channels) and
writes them as compressed-tensors pack-quantized tensors (weight_packed,
weight_scale, weight_zero_point, weight_shape; quant_method
"compressed-tensors", symmetric false). vLLM loads it as uint4 with zero
points and, on CPU, runs it with the same kernel as the GPTQ checkpoint:
int8 dynamic activations (W4A8, int4_scaled_mm_cpu) on AMX CPUs with a bf16
model, bf16 activations (W4A16, cpu_gemm_wna16) elsewhere
(docs/formats.md#w4a8-zp).

The zero point buys what the symmetric grid of ` + "`gptq`" + ` cannot: each group's
grid covers its own [min, max] instead of [-amax, amax]. It costs 4 bits a
group (0.06 bits a weight at group 64).

Group parameters come from an MSE search over ranges shrunk toward 0
(--no-search: plain min/max with 0 inside). g_proj, the embeddings and the
norms stay in the input dtype. --quant-head also quantizes the output head
(untied from the embedding, which stays for the lookup; the config group
targets "lm_head" by name, which vLLM 0.33 and later match for its
ParallelLMHead): on CPU the bf16 head costs more per decode step than all
the 4-bit layers save.

--keep-float N keeps N linear units in the input dtype, named in the
config's ignore list, chosen as for gptq (see its help).` + calibHelp,
		Example: "  sparkconv w4a8-zp --model /tmp/spark-tiny --out /tmp/spark-tiny-w4a8-zp --group 64 --quant-head",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cf.runCalibrated(cmd, &kf, o, &keep,
				func(r *convert.Report, out string) error { return finish4bit(cmd, r, !o.QuantHead, out) })
		},
	}
	cf.register(cmd)
	kf.register(cmd, true, gptq.DefaultFloatTargetUInt4)
	kf.registerWeighted(cmd)
	keep.register(cmd)
	f := cmd.Flags()
	f.IntVar(&o.Group, "group", 64, "group size along the input dimension: 32, 64 or 128")
	f.BoolVar(&o.QuantHead, "quant-head", false, "quantize the output head too (unties it; recommended on CPU)")
	f.BoolVar(&o.NoSearch, "no-search", false, "plain min/max parameters instead of the per-group MSE search")
	oneOf(cmd, "group", intWords(convert.W4A8ZPGroupSizes)...) // convert.W4A8ZP.CheckFlags checks the same list
	rootCmd.AddCommand(cmd)
}
