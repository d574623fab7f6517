package main

import (
	"github.com/spf13/cobra"

	"sparkconv/convert"
	"sparkconv/gptq"
)

func init() {
	var cf convertFlags
	var kf calibFlags
	var o convert.W4A8
	var keep keepFlags
	cmd := &cobra.Command{
		Use:   "gptq --model DIR --out DIR [--group 128] [--quant-head] [--samples FILE] [--tokens N] [--damp F] [--act-order=false] [--rtn] [--no-search] [--keep-float N]",
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
a group size that divides K; nothing is written for a model it cannot load.

--keep-float N keeps N linear units in the input dtype, excluded by a
negative dynamic rule ("-:model\.layers\.3\.mlp\.down_proj$"), which
vLLM runs with its unquantized linear: each unit (q_k_v_proj, o_proj,
gate_proj with up_proj, down_proj of a layer) is quantized alone (int4
rounded to nearest with the searched scales, int8 per-token inputs for a
bf16 model) on --keep-float-tokens tokens of the calibration text, and the
N with the largest KL divergence from the float model are kept. gate_proj
and up_proj go together: vLLM fuses them and needs both shards in one
precision.` + calibHelp,
		Example: "  sparkconv gptq --model /tmp/spark-tiny --out /tmp/spark-tiny-gptq --group 128 --quant-head\n  sparkconv gptq --model /tmp/spark-tiny --out /tmp/spark-tiny-gptq --samples my-text.txt --tokens 16384",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cf.runCalibrated(cmd, &kf, o, &keep,
				func(r *convert.Report, out string) error { return finish4bit(cmd, r, !o.QuantHead, out) })
		},
	}
	cf.register(cmd)
	kf.register(cmd, true, gptq.DefaultFloatTargetSym4)
	kf.registerWeighted(cmd)
	keep.register(cmd)
	f := cmd.Flags()
	f.IntVar(&o.Group, "group", 128, "group size along the input dimension: 32, 64 or 128")
	f.BoolVar(&o.QuantHead, "quant-head", false, "quantize the output head too (unties it; recommended on CPU)")
	f.BoolVar(&o.NoSearch, "no-search", false, "plain absmax scales instead of the per-group MSE scale search")
	oneOf(cmd, "group", intWords(convert.GPTQGroupSizes)...) // convert.W4A8.CheckFlags checks the same list
	rootCmd.AddCommand(cmd)
}
