package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"sparkconv/convert"
	"sparkconv/dtype"
	"sparkconv/keepfloat"
	"sparkconv/spark"
)

// keepFlags are --keep-float and --keep-float-tokens (w8a8, gptq).
type keepFlags struct {
	n      int
	tokens int
}

func (k *keepFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&k.n, "keep-float", 0, "keep this many linear units in float (q_k_v_proj, o_proj, gate_proj+up_proj or down_proj of a layer), the costliest by measured KL divergence when quantized alone on the calibration text; 0: none")
	f.IntVar(&k.tokens, "keep-float-tokens", keepfloat.DefaultTokens, "calibration tokens on which --keep-float measures each unit")
	intIn(cmd, "keep-float", 0, 1<<20)
	intIn(cmd, "keep-float-tokens", 64, 1<<20)
}

// choose measures the units and returns the kept ones (nil without
// --keep-float). files are the calibration samples (--samples).
func (k *keepFlags) choose(cmd *cobra.Command, model string, files []string, format func(dtype.DType) keepfloat.Format) (*convert.KeepFloat, error) {
	if k.n == 0 {
		if cmd.Flags().Changed("keep-float-tokens") {
			return nil, usagef("--keep-float-tokens needs --keep-float N")
		}
		return nil, nil
	}
	cfg, err := spark.LoadConfig(model)
	if err != nil {
		return nil, err
	}
	if units := len(convert.KeepUnits(cfg)); k.n > units {
		return nil, usagef("--keep-float %d: the model has %d units (4 per layer: q_k_v_proj, o_proj, gate_proj+up_proj, down_proj)", k.n, units)
	}
	o := keepfloat.Options{Count: k.n, Files: files, Tokens: k.tokens, Format: format}
	if !jsonOut {
		o.Log = cmd.ErrOrStderr()
	}
	keep, _, err := keepfloat.Choose(cmd.Context(), model, o)
	if err != nil {
		return nil, err
	}
	if !jsonOut {
		fmt.Fprintf(cmd.ErrOrStderr(), "sparkconv: keep-float: keeping %v in float\n", keep.Modules())
	}
	return keep, nil
}
