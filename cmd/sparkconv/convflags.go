package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"sparkconv/convert"
)

// convertFlags are the flags every checkpoint-writing command shares.
type convertFlags struct {
	opt       convert.Options
	shardSize string
	gate      gateFlags // --eval, --max-kld, --min-top1
}

func (c *convertFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&c.opt.Model, "model", "", "input model folder (config.json + safetensors)")
	f.StringVar(&c.opt.Out, "out", "", "output folder (built beside it, renamed into place when complete)")
	f.BoolVar(&c.opt.Force, "force", false, "replace an existing output folder")
	f.StringVar(&c.shardSize, "max-shard-size", "5GB", "largest safetensors shard (e.g. 2GB, 500MB, 0 for one file)")
	c.gate.register(cmd)
	freeForm(cmd, "model", "out")
	sizeIn(cmd, "max-shard-size", 1, 1e15)
}

// options validates the flags and returns the conversion options.
func (c *convertFlags) options() (convert.Options, error) {
	if c.opt.Model == "" || c.opt.Out == "" {
		return c.opt, usagef("--model and --out are required")
	}
	n, err := parseSize(c.shardSize)
	if err != nil {
		return c.opt, usagef("--max-shard-size: %v", err)
	}
	c.opt.MaxShardSize = n
	c.opt.Quiet = jsonOut
	c.opt.Version = version
	return c.opt, nil
}

// parseSize reads a byte count with an optional decimal (KB, MB, GB) or
// binary (KiB, MiB, GiB) unit, as transformers' max_shard_size does.
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GIB", 1 << 30}, {"MIB", 1 << 20}, {"KIB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}
	u := strings.ToUpper(strings.TrimSpace(s))
	mult := int64(1)
	for _, x := range units {
		if strings.HasSuffix(u, x.suffix) {
			u, mult = strings.TrimSpace(strings.TrimSuffix(u, x.suffix)), x.mult
			break
		}
	}
	v, err := strconv.ParseFloat(u, 64)
	n := v * float64(mult)
	if err != nil || !(n >= 0 && n < math.MaxInt64) || n != math.Trunc(n) {
		return 0, fmt.Errorf("%q is not a whole number of bytes", s)
	}
	return int64(n), nil
}

// printReport prints a conversion summary (or the JSON report).
func printReport(cmd *cobra.Command, r *convert.Report, out string) error {
	if jsonOut {
		return printJSON(r)
	}
	t := r.Totals
	fmt.Fprintf(cmd.OutOrStdout(), "%s: wrote %s (%d quantized, %d copied tensors); weight SNR min %.2f / mean %.2f / max %.2f dB, max abs err %.3g; %.1fs, peak RSS %.0f MB\n",
		r.Scheme, out, t.Quantized, t.Copied, t.MinSNRdB, t.MeanSNRdB, t.MaxSNRdB, t.MaxErr, r.Timing.TotalS, r.PeakRSSMB)
	return nil
}
