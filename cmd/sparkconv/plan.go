package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"sparkconv/infile"
	"sparkconv/kernels"
	"sparkconv/plan"
)

func init() {
	var target, priority, cpuinfo, model string
	cmd := &cobra.Command{
		Use:   "plan [--target auto|x86-amx|x86-avx512|x86-avx2|arm64|phone] [--priority speed|fidelity|size] [--cpuinfo FILE] [--model DIR]",
		Short: "Choose the weight path for a target machine and print the command that builds it",
		Long: `Chooses how to build the model for a target: an x86 CPU with AMX runs GPTQ
W4A8 (vLLM's int4_scaled_mm_cpu on AMX tiles); without AMX, or with
--priority fidelity, W4A16 (torch's tinygemm with bf16 activations), packed for
the CPU's kernel; ARM64 gets W4A16 too, flagged unverified; a phone gets the
ONNX decode-step export with the calibrated w8a16 QNN bundle, or with
--priority size the w4a16-lpbq bundle (4-bit weights in blocks of 64); on a
CPU the 4-bit builds are one size, so size picks what speed picks. --target auto
(the default) probes /proc/cpuinfo (or --cpuinfo FILE, e.g. one recorded on the
target machine) for amx_tile, amx_int8, avx512f and avx2.`,
		Example: `  sparkconv plan
  sparkconv plan --cpuinfo target-cpuinfo.txt --model /tmp/spark --json
  sparkconv plan --target phone --model /tmp/spark
  sparkconv plan --target phone --priority size --model /tmp/spark`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cpuinfo != "" && target != "auto" {
				return usagef("--cpuinfo is probed only with --target auto")
			}
			c, err := runPlan(target, priority, cpuinfo, model)
			if err != nil {
				return err
			}
			out := planOutput{Choice: c}
			if target == "auto" && cpuinfo == "" { // the running machine
				f := kernels.CPU()
				out.CPU, out.Kernels = &f, kernels.Selection()
			}
			if jsonOut {
				return printJSON(out)
			}
			w := cmd.OutOrStdout()
			verified := ""
			if !c.Verified {
				verified = " (UNVERIFIED: no build has been measured on this target)"
			}
			fmt.Fprintf(w, "target %s", c.Target)
			if c.Probe != nil {
				fmt.Fprintf(w, " (probed %s: %s %s, flags %s)", c.Probe.Source, c.Probe.Arch, c.Probe.Model, strings.Join(c.Probe.Flags, " "))
			}
			fmt.Fprintf(w, "\npath %s%s\nwhy: %s\nruns on: %s\n", c.Path, verified, c.Why, c.Runs)
			if c.GPTQHere != "" {
				fmt.Fprintf(w, "gptq here: %s\n", c.GPTQHere)
			}
			fmt.Fprintf(w, "run:\n  %s\n", c.Command)
			if out.CPU != nil {
				fmt.Fprintf(w, "this machine's forward kernels (CPU probe: %s):\n", out.CPU)
				for _, k := range out.Kernels {
					fmt.Fprintf(w, "  %s: %s\n    why: %s\n", k.Op, k.Kernel, k.Why)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&target, "target", "auto", "auto (probe this machine or --cpuinfo), x86-amx, x86-avx512, x86-avx2, arm64 or phone")
	f.StringVar(&priority, "priority", "speed", "speed, fidelity or size")
	f.StringVar(&cpuinfo, "cpuinfo", "", "probe this /proc/cpuinfo text instead of the running machine's")
	f.StringVar(&model, "model", "MODEL", "the model folder, used in the printed command")
	oneOf(cmd, "target", plan.Targets...)
	oneOf(cmd, "priority", plan.Priorities...)
	freeForm(cmd, "cpuinfo", "model")
	rootCmd.AddCommand(cmd)
}

// planOutput is the plan, plus the CPU probe and the forward's kernel
// selection when the plan is for the running machine.
type planOutput struct {
	plan.Choice
	CPU     *kernels.Features `json:"cpu,omitempty"`
	Kernels []kernels.Choice  `json:"kernels,omitempty"`
}

func runPlan(target, priority, cpuinfo, model string) (plan.Choice, error) {
	if target != "auto" {
		return plan.Choose(target, priority, model)
	}
	path := cpuinfo
	if path == "" {
		path = "/proc/cpuinfo"
	}
	data, err := infile.ReadFile(path, infile.CPUInfoMax)
	if errors.Is(err, os.ErrNotExist) && cpuinfo == "" {
		return plan.Auto(nil, "GOARCH", priority, model)
	}
	if err != nil {
		return plan.Choice{}, err
	}
	return plan.Auto(data, path, priority, model)
}
