package convert

import (
	"encoding/binary"
	"fmt"
	"math"

	"sparkconv/dtype"
	"sparkconv/quant"
)

// f16Max is float16's largest finite value.
const f16Max = 65504

// checkScaleRange refuses, before anything is solved or written, a target
// whose largest weight needs a scale float16 cannot hold when the format
// stores its scales in float16 (GPTQ's, whatever the model's dtype): the
// quantizer would clamp the scale to 65504 and every larger weight would
// be clipped without a word. A 4-bit grid's scale is at most 2·max|w|/15,
// int8's max|w|/127. Float16 weights always fit.
func checkScaleRange(j *Job, targets []Target, g GridSpec) error {
	if g.DType != quant.ScaleF16 {
		return nil
	}
	steps := 15.0 / 2
	if g.Kind == GridInt8 {
		steps = 127
	}
	for _, t := range targets {
		if info, ok := j.Model.Info(t.Source); ok && info.DType == dtype.F16 {
			continue
		}
		info, raw, err := j.Model.Raw(t.Source)
		if err != nil {
			return err
		}
		amax := absMax(raw, info.DType)
		j.Model.Checkpoint.Release(t.Source)
		if scale := amax / steps; scale > f16Max {
			return fmt.Errorf("%s: its largest weight, %.4g, needs a scale of %.4g, beyond float16's %d, the dtype %s checkpoints store scales in: the weights are out of the format's range (the scale would be clamped and the weights clipped)",
				t.Source, amax, scale, f16Max, j.Report.Scheme)
		}
	}
	return nil
}

// absMax is the largest magnitude of a bf16 or f32 tensor's values (0 for
// other dtypes).
func absMax(raw []byte, dt dtype.DType) float64 {
	var m uint32
	switch dt {
	case dtype.BF16:
		for i := 0; i+2 <= len(raw); i += 2 {
			m = max(m, uint32(binary.LittleEndian.Uint16(raw[i:])&0x7fff))
		}
		return float64(math.Float32frombits(m << 16))
	case dtype.F32:
		for i := 0; i+4 <= len(raw); i += 4 {
			m = max(m, binary.LittleEndian.Uint32(raw[i:])&0x7fffffff)
		}
		return float64(math.Float32frombits(m))
	}
	return 0
}
