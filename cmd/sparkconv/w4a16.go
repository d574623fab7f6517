package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"sparkconv/convert"
	"sparkconv/gptq"
)

func init() {
	var cf convertFlags
	var kf calibFlags
	var o convert.W4A16
	cmd := &cobra.Command{
		Use:   "w4a16 --model DIR --out DIR [--group 128] [--quant-head] [--pack portable|avx512|avx2] [--samples FILE] [--tokens N] [--damp F] [--act-order=false] [--rtn] [--no-search]",
		Short: "Write a cpu_int4 4-bit checkpoint for torch's CPU tinygemm kernel (W4A16, bf16 activations)",
		Long: `Quantizes the 5 linears of every layer to 4 bits on tinygemm's asymmetric grid
(w = (q - 8) * scale + zero, scale and float zero per group of --group input
channels, in the activation dtype) for torch.ops.aten._weight_int4pack_mm_for_cpu
(torch >= 2.6). Per linear: qweight uint8 [N, K/2] and scales_and_zeros
[K/g, N, 2]; quantization_config.quant_method is "cpu_int4" (docs/formats.md#w4a16-tinygemm
has the format and a loader).

--pack portable (default) stores codes of adjacent k in each byte (even k in
the low nibble), which every CPU can use after _convert_weight_to_int4pack_for_cpu.
--pack avx512 / avx2 store the kernel's own pre-packed layout for that ISA
(loads without the int32 expansion, but only on a torch dispatched for it).

Parameters come from an MSE search over shrunk ranges (--no-search: plain
min/max). g_proj, the embeddings and the norms stay in the input dtype.
--quant-head also quantizes the output head (untied from the embedding).` + calibHelp,
		Example: "  sparkconv w4a16 --model /tmp/spark-tiny --out /tmp/spark-tiny-w4a16 --quant-head",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cf.runCalibrated(cmd, &kf, o, nil,
				func(r *convert.Report, out string) error { return finish4bit(cmd, r, !o.QuantHead, out) })
		},
	}
	cf.register(cmd)
	kf.register(cmd, true, gptq.DefaultFloatTarget)
	kf.registerWeighted(cmd)
	f := cmd.Flags()
	f.IntVar(&o.Group, "group", 128, "group size along the input dimension: 32, 64, 128 or 256")
	f.StringVar(&o.Pack, "pack", "portable", "qweight layout: portable, avx512 or avx2")
	f.BoolVar(&o.QuantHead, "quant-head", false, "quantize the output head too (unties it; recommended on CPU)")
	f.BoolVar(&o.NoSearch, "no-search", false, "plain min/max parameters instead of the per-group MSE search")
	oneOf(cmd, "group", intWords(convert.W4A16GroupSizes)...) // convert.W4A16.CheckFlags checks the same lists
	oneOf(cmd, "pack", convert.W4A16Packs...)
	rootCmd.AddCommand(cmd)
}

// headNote tells a 4-bit user on stderr what keeping the head in bf16 costs.
func headNote(cmd *cobra.Command) {
	fmt.Fprintln(cmd.ErrOrStderr(), `sparkconv: note: the output head stays bf16 (no --quant-head). On CPU the head
  is the largest GEMM of a decode step: on the real model the bf16 head costs
  2.97 ms of an 11.5 ms step, more than all the 4-bit layers save. Add
  --quant-head to quantize it (the embedding stays bf16 for the lookup).`)
}

// finish4bit prints the head note (when the format could quantize the
// head and did not), any warning the writer recorded, and the summary line
// plus the SNR the search gained.
func finish4bit(cmd *cobra.Command, r *convert.Report, noteHead bool, out string) error {
	if noteHead {
		headNote(cmd)
	}
	if w, ok := r.Settings["warning"]; ok {
		fmt.Fprintln(cmd.ErrOrStderr(), "sparkconv: warning:", w)
	}
	if err := printReport(cmd, r, out); err != nil || jsonOut {
		return err
	}
	t := r.Totals
	if r.Calibration != nil {
		printHeldOut(cmd, r)
		return nil
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: mean weight SNR %.2f dB with %s, %.2f dB with plain round-to-nearest (%+.2f dB)\n",
		r.Scheme, t.MeanSNRdB, r.Method, t.PlainMeanSNRdB, t.MeanSNRdB-t.PlainMeanSNRdB)
	return nil
}

// printHeldOut prints the held-out output error of a calibrated run per
// module type: GPTQ's codes against round to nearest's on the same weights.
func printHeldOut(cmd *cobra.Command, r *convert.Report) {
	type sum struct {
		n        int
		gptq, rn float64
	}
	by := map[string]*sum{}
	var order []string
	for _, t := range r.Tensors {
		if t.GPTQ == nil {
			continue
		}
		kind := moduleKind(t.Name)
		if by[kind] == nil {
			by[kind] = &sum{}
			order = append(order, kind)
		}
		s := by[kind]
		s.n++
		s.gptq += t.GPTQ.OutErr
		s.rn += t.GPTQ.OutErrRTN
	}
	c := r.Calibration
	smooth := ""
	if c.SmoothAlpha > 0 {
		smooth = fmt.Sprintf(", SmoothQuant alpha %g", c.SmoothAlpha)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: GPTQ on %d calibration tokens (%d in the Hessians), damp %g%s, %d fallbacks; held-out relative output error, mean per module:\n",
		r.Scheme, c.Tokens, c.HessianTokens, c.DampPercent, smooth, len(c.Fallbacks))
	for _, k := range order {
		s := by[k]
		fmt.Fprintf(cmd.OutOrStdout(), "  %-12s x%-3d GPTQ %.4g  round-to-nearest %.4g  (%.2fx lower)\n", k, s.n, s.gptq/float64(s.n), s.rn/float64(s.n), s.rn/s.gptq)
	}
}

// moduleKind is the module type of a tensor name: q_k_v_proj, down_proj,
// lm_head...
func moduleKind(name string) string {
	name = strings.TrimSuffix(name, ".weight")
	if i := strings.LastIndex(name, "."); i >= 0 {
		name = name[i+1:]
	}
	if name == "embed_tokens" {
		return "lm_head"
	}
	return name
}
