// Package plan chooses the weight path for a target machine: an x86 CPU
// with AMX runs GPTQ W4A8 (vLLM's int4_scaled_mm_cpu); without AMX, or
// when fidelity is asked for, W4A16 (torch's tinygemm, bf16 activations,
// the more faithful 4-bit build: on the real model's agent tasks W4A8
// failed a task that W4A16 completed); ARM64 gets W4A16 too, flagged
// unverified (no build has been measured there); a phone gets the ONNX
// decode-step export with the calibrated w8a16 QNN bundle.
// The target comes from a hardware probe: /proc/cpuinfo's flags (amx_tile,
// amx_int8, avx512f, avx2 on x86; a Features line on ARM) and GOARCH.
package plan

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
)

// Targets are the values of --target.
var Targets = []string{"auto", "x86-amx", "x86-avx512", "x86-avx2", "arm64", "phone"}

// Priorities are the values of --priority.
var Priorities = []string{"speed", "fidelity", "size"}

// The weight paths.
const (
	PathW4A8  = "w4a8-zp"
	PathW4A16 = "w4a16"
	PathONNX  = "onnx-w8a16"
	// PathONNXW4 is the phone path at --priority size: the decode-step
	// export with the w4a16-lpbq bundle.
	PathONNXW4 = "onnx-w4a16-lpbq"
)

// Probe is what was read about the machine.
type Probe struct {
	Source string   `json:"source"` // the cpuinfo file read, or "GOARCH"
	Arch   string   `json:"arch"`   // "amd64" or "arm64"
	Model  string   `json:"model,omitempty"`
	Flags  []string `json:"flags"` // the flags that decide: amx_tile, amx_int8, avx512f, avx2
}

// ProbeCPUInfo reads a /proc/cpuinfo text (name for messages); goarch is
// used when the text does not say (runtime.GOARCH for the running host).
func ProbeCPUInfo(data []byte, name, goarch string) (Probe, error) {
	p := Probe{Source: name, Arch: goarch}
	var flags, features []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "flags":
			if flags == nil {
				flags = strings.Fields(v)
			}
		case "Features":
			if features == nil {
				features = strings.Fields(v)
			}
		case "model name":
			if p.Model == "" {
				p.Model = v
			}
		}
	}
	if err := sc.Err(); err != nil {
		return p, fmt.Errorf("%s: %w", name, err)
	}
	switch {
	case flags != nil:
		p.Arch = "amd64"
		for _, f := range []string{"amx_tile", "amx_int8", "avx512f", "avx2"} {
			if slices.Contains(flags, f) {
				p.Flags = append(p.Flags, f)
			}
		}
	case features != nil:
		p.Arch = "arm64"
		p.Flags = []string{}
	default:
		return p, fmt.Errorf("%s: no \"flags\" (x86) or \"Features\" (ARM) line: not a /proc/cpuinfo", name)
	}
	return p, nil
}

// Class is the target class of a probe: x86-amx, x86-avx512, x86-avx2,
// x86 (none of them) or arm64.
func (p Probe) Class() string {
	has := func(f string) bool { return slices.Contains(p.Flags, f) }
	switch {
	case p.Arch == "arm64":
		return "arm64"
	case p.Arch != "amd64" && p.Arch != "386":
		return p.Arch
	case has("amx_tile") && has("amx_int8"):
		return "x86-amx"
	case has("avx512f"):
		return "x86-avx512"
	case has("avx2"):
		return "x86-avx2"
	}
	return "x86"
}

// Choice is the plan: the weight path, the command that makes it, and why.
type Choice struct {
	Target   string `json:"target"`
	Probe    *Probe `json:"probe,omitempty"`
	Priority string `json:"priority"`
	Path     string `json:"path"`
	Command  string `json:"command"`
	Why      string `json:"why"`
	// Runs is the runtime and kernel the build meets on the target, with
	// the activations they compute in.
	Runs string `json:"runs"`
	// GPTQHere, on an x86 target without AMX, is what vLLM does with the
	// W4A8 checkpoints (w4a8-zp, gptq) there: they run, as W4A16.
	GPTQHere string `json:"gptq_here,omitempty"`
	Verified bool   `json:"verified"`
}

// Why the W4A8 build starts from the rotated checkpoint and the W4A16 one
// does not (docs/benchmarks.md#real-model; measured on SmolLM2-135M mapped
// to Spark, group 64, testdata/real/heldout.txt, each command at its
// defaults).
const (
	rotatedW4A8 = "built from the rotated checkpoint (rotate, without down_proj smoothing, which costs int4 down_proj more than int8 activations gain) on the grid with an integer zero point per group (w4a8-zp: 7-12 % below gptq's symmetric grid at the same recipe, figures below) at group 32, with the 16 linears whose int4 weights and int8 inputs cost most kept in bf16 (--keep-float 16, measured on calibration text; their bytes are read every token, so decode reads 1.4x the weight bytes of a group-128 build: 5.9 bits a layer weight against about 4.2): on a real model with its head in bf16, mean KLD 0.046 on held-out text and 0.057 on agent transcripts nobody tuned on, 1.06x and 1.09x W4A16 at group 64 (0.043, 0.052), at 5.9 bits a layer weight against W4A16's 4.5 (gptq with the same recipe: 0.052 and 0.061; at group 64 with none kept: 0.073 and 0.088, 4.31 bits); with the head quantized as built here, 0.056 and 0.066"
	plainW4A16  = "built from the checkpoint as it is, with act-order (w4a16's default): mean KLD 0.043 on a real model's held-out text and 0.052 on agent transcripts nobody tuned on, where rotating it first (rotate, with down_proj smoothing) gives 0.061 and 0.074"
	// What vLLM's CPU int4 kernel (CPUWNA16LinearKernel, vLLM 0.33 and
	// 0.34) does with a w4a8-zp checkpoint, and what tinygemm does with
	// w4a16.
	runsW4A8     = "vLLM (0.33 and later) loads it as compressed-tensors uint4 with zero points (the head by its lm_head target) on CPUWNA16LinearKernel: int4_scaled_mm_cpu on AMX tiles, activations quantized per row to int8, when the model is bf16 and VLLM_CPU_INT4_W4A8 is on (its default); otherwise the same checkpoint runs on cpu_gemm_wna16 with bf16 activations"
	runsTinygemm = "torch's tinygemm int4 kernel (_weight_int4pack_mm_for_cpu) with bf16 activations, the weights in the layout --pack names"
	gptqNoAMX    = "the W4A8 checkpoints (w4a8-zp, gptq) load here too: without AMX vLLM runs them on cpu_gemm_wna16 (the \"vec\" ISA) with bf16 activations, so they score as their weights alone, not as W4A8 (on the real model int8 activations cost 1.3-1.4x the weights-only mean KLD of either); w4a16's float-zero grid stays the more faithful build"
	runsQNN      = "Qualcomm's QNN HTP backend (through AI Hub or qnn-context-binary-generator), the host driving the decode-step graphs with their KV caches"
	sizeCPU      = "size first: the CPU builds are 4-bit at group 128 alike (about 4.2 bits a layer weight: w4a8-zp's bf16 scale and 4-bit zero point, w4a16's bf16 scale and zero point per group of 128), so size picks what speed picks"
	amxW4A8      = "AMX (amx_tile, amx_int8): vLLM's CPU int4 path runs the W4A8 kernel int4_scaled_mm_cpu on AMX tiles for a bf16 model, the fastest CPU path"
	sizeAMX      = "size first: the W4A8 build at group 128 with no linear kept in float, about 4.2 bits a layer weight (a bf16 scale and a 4-bit zero point per group of 128), the smallest CPU build; it gives up what the smaller groups and the kept linears buy (on the real model at group 64, whose 576 columns take no group of 128, head bf16, mean KLD 0.073 on held-out text and 0.088 on agent transcripts, against the speed build's 0.046 and 0.057)"
	sizeQNN      = "phone, size first: the decode-step export quantized as the w4a16-lpbq bundle, Qualcomm's LLM recipe (4-bit layer weights in AIMET LPBQ blocks of 64, the head's weights and the KV cache at 8 bits, 16-bit activations), half the w8a16 bundle's layer weight bytes on the device; qnn-bundle rebuilds a layer with 8-bit weights where its worst held-out sequence falls under 20 dB (--promote-below); it costs fidelity: on a real model (rotated, export at context 1024, qnn-bundle's defaults) one layer is promoted and every layer simulates at 20.4 dB or more on each held-out sequence against w8a16's 34.5, and eval gives a mean KLD of 0.22 and perplexity x1.22 on held-out text against the same recipe's w8a16 bundle's 0.0060 and x1.004 (--promote-below 24: nine layers at 8 bits, 0.14 and x1.12)"
	rotatedQNN   = "built from the rotated checkpoint with down_proj smoothing (rotate): on a real model every layer of the w8a16 bundle simulates at 34.5 dB or more on each held-out sequence (prose, chat with tool calls and JSON, code), against 16.5 dB at worst unrotated (12 layers under 30 on some sequence, refused by the 20 dB bar)"
)

// Choose applies the rule to a target class (not "auto") for the model
// folder model (used in the command).
func Choose(target, priority, model string) (Choice, error) {
	if !slices.Contains(Priorities, priority) {
		return Choice{}, fmt.Errorf("--priority %q: want one of %s", priority, strings.Join(Priorities, ", "))
	}
	out := strings.TrimSuffix(model, "/")
	if priority == "size" && target != "phone" {
		c, err := Choose(target, "speed", model)
		c.Priority, c.Why = priority, sizeCPU+"; "+c.Why
		if target == "x86-amx" {
			c.Command, c.Why = w4a8Command(model, out, 128, 0), sizeAMX+"; "+amxW4A8
		}
		return c, err
	}
	c := Choice{Target: target, Priority: priority, Verified: true}
	w4a16 := func(pack, why string) {
		c.Path = PathW4A16
		c.Command = fmt.Sprintf("sparkconv w4a16 --model %s --out %s-w4a16 --group 128 --quant-head --pack %s", model, out, pack)
		c.Why = why + "; " + plainW4A16
		c.Runs = runsTinygemm
	}
	switch target {
	case "x86-amx":
		if priority == "fidelity" {
			w4a16("avx512", "AMX is there, but fidelity was asked for: W4A16 keeps bf16 activations (on the real model's agent tasks W4A8's int8 activations failed a task that W4A16 completed); tinygemm runs its AVX-512 kernel")
			break
		}
		c.Path = PathW4A8
		c.Command = w4a8Command(model, out, 32, 16)
		c.Why = amxW4A8 + "; " + rotatedW4A8 + "; check it with sparkconv eval"
		c.Runs = runsW4A8
	case "x86-avx512":
		w4a16("avx512", "no AMX: vLLM's W4A8 kernel needs AMX, so W4A16 (torch's tinygemm, bf16 activations) on its AVX-512 kernel, written in that kernel's own layout")
		c.GPTQHere = gptqNoAMX
	case "x86-avx2":
		w4a16("avx2", "no AMX and no AVX-512: W4A16 on tinygemm's AVX2 kernel, written in that kernel's own layout")
		c.GPTQHere = gptqNoAMX
	case "x86":
		w4a16("portable", "no AVX2: tinygemm falls back to its scalar path, slow")
		c.GPTQHere = gptqNoAMX
		c.Verified = false
	case "arm64":
		w4a16("portable", "ARM64: W4A16 through torch's CPU int4 kernel (portable codes); no build has been measured on ARM, so check it with sparkconv eval and on the device")
		c.Verified = false
	case "phone":
		if priority == "size" {
			c.Path = PathONNXW4
			c.Command = fmt.Sprintf("sparkconv rotate --model %s --out %s-rot && sparkconv export-onnx --model %s-rot --out %s-onnx --layout ring && sparkconv qnn-bundle --model %s-rot --export %s-onnx --out %s-qnn --precision w4a16-lpbq", model, out, out, out, out, out, out)
			c.Runs = runsQNN
			c.Why = sizeQNN
			break
		}
		c.Path = PathONNX
		c.Command = fmt.Sprintf("sparkconv rotate --model %s --out %s-rot && sparkconv export-onnx --model %s-rot --out %s-onnx --layout ring && sparkconv qnn-bundle --model %s-rot --export %s-onnx --out %s-qnn --precision w8a16", model, out, out, out, out, out, out)
		c.Runs = runsQNN
		c.Why = "phone: one decode step per layer as ONNX with explicit ring KV caches for QNN, quantized as the calibrated w8a16 bundle (8-bit weights, 16-bit activations with ranges from real text: 36.9 dB per layer on a phone NPU, where uncalibrated w4a16 is uncorrelated and w8a8 falls to 5.1 dB); " + rotatedQNN
	default:
		return Choice{}, fmt.Errorf("--target %q: want one of %s", target, strings.Join(Targets, ", "))
	}
	return c, nil
}

// w4a8Command is the W4A8 build: rotate without down_proj smoothing,
// then w4a8-zp at group with keep linears kept in bf16 (0: none).
func w4a8Command(model, out string, group, keep int) string {
	cmd := fmt.Sprintf("sparkconv rotate --model %s --out %s-rot --smooth-down 0 && sparkconv w4a8-zp --model %s-rot --out %s-w4a8-zp --group %d --quant-head", model, out, out, out, group)
	if keep > 0 {
		cmd += fmt.Sprintf(" --keep-float %d", keep)
	}
	return cmd
}

// Auto probes (the cpuinfo text, or GOARCH alone when it is nil) and
// chooses.
func Auto(cpuinfo []byte, name, priority, model string) (Choice, error) {
	var p Probe
	if cpuinfo == nil {
		if runtime.GOARCH != "arm64" {
			return Choice{}, errors.New("no cpuinfo to probe: give --cpuinfo FILE or --target")
		}
		p = Probe{Source: "GOARCH", Arch: runtime.GOARCH, Flags: []string{}}
	} else {
		var err error
		if p, err = ProbeCPUInfo(cpuinfo, name, runtime.GOARCH); err != nil {
			return Choice{}, err
		}
	}
	c, err := Choose(p.Class(), priority, model)
	if err != nil {
		return Choice{}, fmt.Errorf("%s: %w", name, err)
	}
	c.Probe = &p
	return c, nil
}
