package main

import (
	"fmt"
	"regexp"

	"github.com/spf13/cobra"

	"sparkconv/convert"
	"sparkconv/keepfloat"
	"sparkconv/pipeline"
	"sparkconv/spark"
)

// keepFlags are --keep-float and --keep-float-tokens (w8a8, gptq, w4a8-zp).
type keepFlags struct {
	n       int
	tokens  int
	modules []string
}

// keepModuleName is the form of a --keep-float-modules item.
var keepModuleName = regexp.MustCompile(`^model\.layers\.[0-9]+\.(self_attn\.(q_k_v_proj|o_proj)|mlp\.(gate_proj|up_proj|down_proj))$`)

func (k *keepFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&k.n, "keep-float", 0, "keep this many linear units in float (q_k_v_proj, o_proj, gate_proj+up_proj or down_proj of a layer), the costliest by measured KL divergence when quantized alone on the calibration text; 0: none")
	f.IntVar(&k.tokens, "keep-float-tokens", keepfloat.DefaultTokens, "calibration tokens on which --keep-float measures each unit")
	f.StringSliceVar(&k.modules, "keep-float-modules", nil, "keep exactly these linears in float instead of measuring (full names, comma-separated; gate_proj and up_proj of a layer together), e.g. a previous build's sparkconv_keep_float.modules")
	intIn(cmd, "keep-float", 0, 1<<20)
	intIn(cmd, "keep-float-tokens", 64, 1<<20)
	checkedBy(cmd, "keep-float-modules", "a linear's full name, e.g. model.layers.3.mlp.down_proj", func(s string) error {
		if !keepModuleName.MatchString(s) {
			return fmt.Errorf("%q is not q_k_v_proj, o_proj, gate_proj, up_proj or down_proj of a layer", s)
		}
		return nil
	}, "lm_head", "model.layers.0.self_attn.g_proj", "model.layers.x.mlp.down_proj", "model.layers.0.mlp.down_proj.weight").unset()
}

// request is the kept set the flags ask for (the zero Keep without
// --keep-float or --keep-float-modules): a count to measure on files (the
// calibration samples, --samples) or the named modules of model.
func (k *keepFlags) request(cmd *cobra.Command, model string, files []string) (pipeline.Keep, error) {
	if k.n > 0 && len(k.modules) > 0 {
		return pipeline.Keep{}, usagef("--keep-float N measures which units to keep, --keep-float-modules names them: give one")
	}
	if k.n == 0 && cmd.Flags().Changed("keep-float-tokens") {
		return pipeline.Keep{}, usagef("--keep-float-tokens needs --keep-float N")
	}
	if k.n == 0 && len(k.modules) == 0 {
		return pipeline.Keep{}, nil
	}
	cfg, err := spark.LoadConfig(model)
	if err != nil {
		return pipeline.Keep{}, err
	}
	if len(k.modules) > 0 {
		keep, err := convert.KeepModules(cfg, k.modules)
		if err != nil {
			return pipeline.Keep{}, usagef("--keep-float-modules: %v", err)
		}
		keep.Record = map[string]any{"chosen_by": "--keep-float-modules (not measured in this build)"}
		return pipeline.Keep{Named: keep}, nil
	}
	if units := len(convert.KeepUnits(cfg)); k.n > units {
		return pipeline.Keep{}, usagef("--keep-float %d: the model has %d units (4 per layer: q_k_v_proj, o_proj, gate_proj+up_proj, down_proj)", k.n, units)
	}
	r := pipeline.Keep{Count: k.n, Files: files, Tokens: k.tokens}
	if !jsonOut {
		r.Log = cmd.ErrOrStderr()
	}
	return r, nil
}
