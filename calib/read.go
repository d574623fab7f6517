package calib

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"

	"sparkconv/forward"
	"sparkconv/infile"
	"sparkconv/safetensors"
	"sparkconv/spark"
)

// ReadSummary reads dir/summary.json and checks its format.
func ReadSummary(dir string) (*Summary, error) {
	path := filepath.Join(dir, SummaryFile)
	data, err := infile.ReadFile(path, infile.ManifestMax)
	if err != nil {
		return nil, err
	}
	var s Summary
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if s.Format != SummaryFormat || s.Version != SummaryVersion {
		return nil, fmt.Errorf("%s: format %q version %d, want %q version %d", path, s.Format, s.Version, SummaryFormat, SummaryVersion)
	}
	return &s, nil
}

var layerModuleRE = regexp.MustCompile(`^model\.layers\.(\d+)\.(.+)$`)

// StatsOf maps a linear module to the statistics of its input: module is
// "model.layers.{i}.{spark module}" (q_k_v_proj, g_proj, o_proj, gate_proj,
// up_proj, down_proj) or "lm_head" (the head, tied or not). It returns the
// tensor name prefix and the file holding it. Modules that read the same
// activation share it: g_proj reads q_k_v_proj's input, up_proj gate_proj's.
func StatsOf(module string) (prefix, file string, err error) {
	if module == HeadModule {
		return HeadModule + ".input", HeadFile, nil
	}
	m := layerModuleRE.FindStringSubmatch(module)
	if m == nil {
		return "", "", fmt.Errorf("module %q is not model.layers.{i}.<linear> or %s", module, HeadModule)
	}
	i, err := strconv.Atoi(m[1])
	if err != nil {
		return "", "", fmt.Errorf("module %q: layer index: %w", module, err)
	}
	for _, in := range forward.LinearInputs {
		for _, r := range in.Readers {
			if r == m[2] {
				return spark.LayerModule(i, in.Readers[0]) + ".input", LayerFile(i), nil
			}
		}
	}
	return "", "", fmt.Errorf("module %q: %q is not a linear of a layer", module, m[2])
}

// ReadHessian returns the Hessian sum X^T X of module's input (see StatsOf)
// as float64, row-major [n, n], with n and the number of tokens summed.
// GPTQ's H is 2/tokens times it.
func ReadHessian(dir, module string) (h []float64, n int, tokens int64, err error) {
	prefix, file, err := StatsOf(module)
	if err != nil {
		return nil, 0, 0, err
	}
	f, err := safetensors.OpenFile(filepath.Join(dir, file))
	if err != nil {
		return nil, 0, 0, err
	}
	defer f.Close()
	ti, hf, err := f.Float32(prefix + SuffixHessian)
	if err != nil {
		return nil, 0, 0, err
	}
	if len(ti.Shape) != 2 || ti.Shape[0] != ti.Shape[1] {
		return nil, 0, 0, fmt.Errorf("%s: %s has shape %v, want [n, n]", f.Path, ti.Name, ti.Shape)
	}
	ct, raw, err := f.Raw(prefix + SuffixTokens)
	if err != nil {
		return nil, 0, 0, err
	}
	if ct.DType != "I64" || len(raw) != 8 {
		return nil, 0, 0, fmt.Errorf("%s: %s is %s%v, want I64 [1]", f.Path, ct.Name, ct.DType, ct.Shape)
	}
	h = make([]float64, len(hf))
	for k, v := range hf {
		h[k] = float64(v)
	}
	return h, int(ti.Shape[0]), int64(binary.LittleEndian.Uint64(raw)), nil
}

// ReadChannels returns one per-channel statistic of module's input:
// SuffixAbsMax, SuffixMin, SuffixMax or SuffixMeanSq.
func ReadChannels(dir, module, suffix string) ([]float32, error) {
	prefix, file, err := StatsOf(module)
	if err != nil {
		return nil, err
	}
	f, err := safetensors.OpenFile(filepath.Join(dir, file))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	_, v, err := f.Float32(prefix + suffix)
	return v, err
}
