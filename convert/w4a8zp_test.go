package convert

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"sparkconv/fixtures/fixturestest"
	"sparkconv/safetensors"
)

// The decoder below is written from compressed-tensors' pack_to_int32
// (docs/formats.md#w4a8-zp), not from the packers: it checks the files.

// zpLinear is one decoded pack-quantized linear.
type zpLinear struct {
	n, k, g int
	q       []int     // [n*k]
	zero    []int     // [n * k/g]
	scale   []float64 // [n * k/g]
}

// value is (q[n, k] - zero[n, k/g]) * scale[n, k/g].
func (l *zpLinear) value(n, k int) float64 {
	gi := n*(l.k/l.g) + k/l.g
	return float64(l.q[n*l.k+k]-l.zero[gi]) * l.scale[gi]
}

func readZP(t *testing.T, ck *safetensors.Checkpoint, module string, n, k, g int) *zpLinear {
	t.Helper()
	get := func(suffix, dt string, shape ...int64) []byte { return rawPart(t, ck, module, suffix, dt, shape...) }
	groups := k / g
	l := &zpLinear{n: n, k: k, g: g, q: make([]int, n*k), zero: make([]int, n*groups)}
	packed := get("weight_packed", "I32", int64(n), int64(k/8))
	for i := range l.q { // element i of a row sits in word i/8 at bits 4*(i%8)
		w := binary.LittleEndian.Uint32(packed[4*(i/8):])
		l.q[i] = int(w>>(4*(i%8))) & 15
	}
	zp := get("weight_zero_point", "I32", int64(n/8), int64(groups))
	for r := range n { // packed along N: row r in word (r/8, g) at bits 4*(r%8)
		for gi := range groups {
			w := binary.LittleEndian.Uint32(zp[4*((r/8)*groups+gi):])
			l.zero[r*groups+gi] = int(w>>(4*(r%8))) & 15
		}
	}
	l.scale = decBF16(get("weight_scale", "BF16", int64(n), int64(groups)))
	shape := get("weight_shape", "I64", 2)
	if a, b := binary.LittleEndian.Uint64(shape), binary.LittleEndian.Uint64(shape[8:]); a != uint64(n) || b != uint64(k) {
		t.Errorf("%s.weight_shape = [%d, %d], want [%d, %d]", module, a, b, n, k)
	}
	return l
}

// TestW4A8ZPDecode: every quantized linear decodes, by the format's own
// rule, to the weights the report measured; the config is compressed-
// tensors' asymmetric group-wise pack-quantized scheme; the rest is copied.
func TestW4A8ZPDecode(t *testing.T) {
	for _, g := range []int{32, 64, 128} {
		head := g == 64 // the head quantized at one group size
		t.Run("g"+strconv.Itoa(g), func(t *testing.T) {
			in := fixturestest.Tiny(t, false)
			out := filepath.Join(t.TempDir(), "zp")
			rep := runConvert(t, Options{Model: in, Out: out}, W4A8ZP{Group: g, QuantHead: head})
			qc := readConfig(t, out)["quantization_config"].(map[string]any)
			if qc["quant_method"] != "compressed-tensors" || qc["format"] != "pack-quantized" {
				t.Errorf("quant_method %v, format %v", qc["quant_method"], qc["format"])
			}
			w := qc["config_groups"].(map[string]any)["group_0"].(map[string]any)["weights"].(map[string]any)
			for key, want := range map[string]any{"num_bits": 4.0, "type": "int", "symmetric": false, "strategy": "group", "group_size": float64(g), "actorder": nil} {
				if !reflect.DeepEqual(w[key], want) {
					t.Errorf("weights.%s = %v, want %v", key, w[key], want)
				}
			}
			group := qc["config_groups"].(map[string]any)["group_0"].(map[string]any)
			ignore := qc["ignore"].([]any)
			if wantT, wantI := map[bool]int{false: 1, true: 2}[head], map[bool]int{false: 2, true: 1}[head]; len(group["targets"].([]any)) != wantT || len(ignore) != wantI || head == (ignore[0] == "lm_head") {
				t.Errorf("quant head %v: targets %v, ignore %v", head, group["targets"], ignore)
			}
			src, dst := openConverted(t, in, out)
			reported := map[string]TensorReport{}
			for _, r := range rep.Tensors {
				reported[r.Name] = r
			}
			targets := Targets(src.Config, head)
			var gain float64
			zeros := map[int]int{}
			for _, tg := range targets {
				_, raw, _ := src.Raw(tg.Source)
				l := readZP(t, dst, tg.Module, tg.N, tg.K, g)
				for _, z := range l.zero {
					zeros[z]++
				}
				snr, maxErr := snrOf(decBF16(raw), l.value, tg.N, tg.K)
				gain += checkTarget(t, dst, tg, reported[tg.Source], snr, maxErr)
			}
			if len(zeros) < 4 {
				t.Errorf("zero points take only %d values (%v): the grid is not using them", len(zeros), zeros)
			}
			if gain /= float64(len(targets)); gain < 0.2 || math.IsNaN(gain) {
				t.Errorf("the search gained %.3f dB on average, want >= 0.2", gain)
			}
			t.Logf("g%d: SNR mean %.2f dB (plain %.2f), zero points used %d", g, rep.Totals.MeanSNRdB, rep.Totals.PlainMeanSNRdB, len(zeros))
			checkCopied(t, src, dst, rep, targets, head)
		})
	}
}

// TestW4A8ZPRefusals: group sizes outside the list are usage errors; a
// model the CPU kernel cannot take is refused before anything is written.
func TestW4A8ZPRefusals(t *testing.T) {
	checkRefused(t, Options{}, W4A8ZP{Group: 48}, true, []string{"--group 48", "[32 64 128]"})
	checkRefused(t, Options{Model: writeConfigOnly(t, map[string]any{"intermediate_size": 784})}, W4A8ZP{Group: 32}, false, []string{
		"vLLM's CPU int4 kernel (CPUWNA16LinearKernel)",
		"model.layers.0.mlp.down_proj.weight [256, 784] (N=256 out, K=784 in): K=784 is not a multiple of 32",
		"model.layers.0.mlp.gate_proj.weight [784, 256] (N=784 out, K=256 in): N=784 is not a multiple of 32"})
	checkRefused(t, Options{Model: writeConfigOnly(t, map[string]any{"intermediate_size": 800})}, W4A8ZP{Group: 128}, false, []string{
		"--group 128 does not divide K=800"})
	checkRefused(t, Options{Model: writeConfigOnly(t, map[string]any{"vocab_size": 544})}, W4A8ZP{Group: 128, QuantHead: true}, false, []string{
		"vocab_size 544 is not a multiple of 64"})
}
