package convert

// Linears kept in float (--keep-float): a build copies their weights bit for
// bit and tells its consumer so in the format's own terms, compressed-
// tensors' `ignore` (W8A8) or a negative `dynamic` rule (W4A8). Which ones
// is decided before the conversion (package keepfloat measures each one's
// cost); this file only writes and reads the decision.

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"sparkconv/infile"
	"sparkconv/spark"
)

// KeepFloatKey is the config.json key that records the kept linears and
// how they were chosen.
const KeepFloatKey = "sparkconv_keep_float"

// KeepFloat is the set of linears a build keeps in float.
type KeepFloat struct {
	// Units are the kept units: each is one linear, or gate_proj and
	// up_proj of a layer together (a runtime that fuses them into one
	// gate_up_proj needs both shards in the same precision).
	Units []KeepUnit
	// Record says how they were chosen (config.json and the report).
	Record map[string]any
	// Stamps are the model's files as the measurement read them.
	Stamps []infile.Stamp
}

// Keeper is a format that can keep linears in float (gptq, w8a8, w4a8-zp): WithKeep
// is the format with keep as its kept set.
type Keeper interface {
	Format
	WithKeep(keep *KeepFloat) Format
}

// WithKeep is f keeping keep's linears in float.
func (f W4A8) WithKeep(keep *KeepFloat) Format { f.Keep = keep; return f }

// WithKeep is f keeping keep's linears in float.
func (f W8A8) WithKeep(keep *KeepFloat) Format { f.Keep = keep; return f }

// WithKeep is f keeping keep's linears in float.
func (f W4A8ZP) WithKeep(keep *KeepFloat) Format { f.Keep = keep; return f }

// KeepUnit is one kept unit: its layer and module names (spark.QKV, ...).
type KeepUnit struct {
	Layer   int
	Modules []string
}

// Names are the unit's full module names (model.layers.3.mlp.down_proj).
func (u KeepUnit) Names() []string {
	var out []string
	for _, m := range u.Modules {
		out = append(out, spark.LayerModule(u.Layer, m))
	}
	return out
}

// String is the unit as the report names it.
func (u KeepUnit) String() string { return strings.Join(u.Names(), "+") }

// KeepUnits are the candidate units of a model: per layer q_k_v_proj,
// o_proj, gate_proj with up_proj, down_proj.
func KeepUnits(cfg *spark.Config) []KeepUnit {
	var out []KeepUnit
	for i := range cfg.NumLayers {
		for _, m := range [][]string{{spark.QKV}, {spark.OProj}, {spark.MLPGate, spark.MLPUp}, {spark.MLPDown}} {
			out = append(out, KeepUnit{Layer: i, Modules: m})
		}
	}
	return out
}

// Modules are the kept modules' full names, in unit order.
func (k *KeepFloat) Modules() []string {
	if k == nil {
		return nil
	}
	var out []string
	for _, u := range k.Units {
		out = append(out, u.Names()...)
	}
	return out
}

// keeps reports whether module (a full name) is kept in float.
func (k *KeepFloat) keeps(module string) bool { return slices.Contains(k.Modules(), module) }

// without drops the kept modules from targets.
func (k *KeepFloat) without(targets []Target) []Target {
	if k == nil {
		return targets
	}
	return slices.DeleteFunc(slices.Clone(targets), func(t Target) bool { return k.keeps(t.Module) })
}

// check refuses a unit that is not a candidate of the model (KeepUnits).
func (k *KeepFloat) check(cfg *spark.Config) error {
	if k == nil {
		return nil
	}
	all := KeepUnits(cfg)
	for _, u := range k.Units {
		if !slices.ContainsFunc(all, func(c KeepUnit) bool { return c.String() == u.String() }) {
			return fmt.Errorf("keep-float: %s is not a linear unit of this model (q_k_v_proj, o_proj, gate_proj+up_proj or down_proj of a layer in 0..%d)", u, cfg.NumLayers-1)
		}
	}
	return nil
}

// config is what the build's config.json records (nil: nothing kept).
func (k *KeepFloat) config() any {
	if k == nil || len(k.Units) == 0 {
		return nil
	}
	rec := map[string]any{"modules": k.Modules()}
	for key, v := range k.Record {
		rec[key] = v
	}
	return rec
}

// settings adds the kept modules to a report's settings s (made when s is
// nil and there are any) and returns s.
func (k *KeepFloat) settings(s map[string]any) map[string]any {
	if c := k.config(); c != nil {
		if s == nil {
			s = map[string]any{}
		}
		s["keep_float"] = c
	}
	return s
}

// gptqDynamic is the negative `dynamic` rule (GPTQModel and vLLM: `-:` then
// a regular expression matched from the start of the module name) of each
// kept unit. gate_proj with up_proj also names gate_up_proj, the fused
// module a runtime may build from the two.
func (k *KeepFloat) gptqDynamic(dynamic map[string]any) {
	if k == nil {
		return
	}
	for _, u := range k.Units {
		prefix := regexp.QuoteMeta(spark.LayerModule(u.Layer, ""))
		names := slices.Clone(u.Modules)
		if len(names) == 2 {
			names = append(names, "mlp.gate_up_proj")
		}
		for i, n := range names {
			names[i] = regexp.QuoteMeta(n)
		}
		pat := prefix + names[0]
		if len(names) > 1 {
			pat = prefix + "(?:" + strings.Join(names, "|") + ")"
		}
		dynamic["-:"+pat+"$"] = map[string]any{}
	}
}

// excluded matches module names against compressed-tensors' ignore entries
// or GPTQ's negative dynamic rules, as the consumers read them: an exact
// name, or a regular expression matched from the start of the name.
type excluded struct {
	names []string
	res   []*regexp.Regexp
}

// add adds an exact name, or a pattern (re true).
func (e *excluded) add(s string, re bool) error {
	if !re {
		e.names = append(e.names, s)
		return nil
	}
	x, err := regexp.Compile(`^(?:` + s + `)`)
	if err != nil {
		return fmt.Errorf("pattern %q: %w", s, err)
	}
	e.res = append(e.res, x)
	return nil
}

func (e *excluded) match(module string) bool {
	return slices.Contains(e.names, module) || slices.ContainsFunc(e.res, func(x *regexp.Regexp) bool { return x.MatchString(module) })
}

// KeepModules builds the kept units from full module names. gate_proj
// and up_proj of a layer must come together: vLLM fuses them into one
// gate_up_proj and refuses shards of different precision (compressed-
// tensors' should_ignore_layer, GPTQ's is_layer_gptq_quantized).
func KeepModules(cfg *spark.Config, names []string) (*KeepFloat, error) {
	k := &KeepFloat{}
	byName := map[string]KeepUnit{}
	for _, u := range KeepUnits(cfg) {
		for _, n := range u.Names() {
			byName[n] = u
		}
	}
	seen := map[string]bool{}
	for _, n := range names {
		u, ok := byName[n]
		if !ok {
			return nil, fmt.Errorf("%s is not a quantized linear of this model (q_k_v_proj, o_proj, gate_proj, up_proj or down_proj of a layer in 0..%d)", n, cfg.NumLayers-1)
		}
		for _, m := range u.Names() {
			if !slices.Contains(names, m) {
				return nil, fmt.Errorf("%s without %s: vLLM fuses the two into gate_up_proj and loads both shards in one precision only; keep both or neither", n, m)
			}
		}
		if !seen[u.String()] {
			seen[u.String()] = true
			k.Units = append(k.Units, u)
		}
	}
	return k, nil
}
