#!/usr/bin/env python3
"""real_eval_row.py EVAL_JSON NAME: one line of the table from `sparkconv eval --json`."""
import json
import sys

d = json.load(open(sys.argv[1]))
k, g = d["kld"], d["greedy"]
print(f"{sys.argv[2]}: mean KLD {k['mean']:.4f} ± {k['stderr']:.4f}, p99 {k['p99']:.3f}, "
      f"same top-1 {100 * d['same_top1']:.1f} ± {100 * d['same_top1_err']:.1f} %, PPL {d['ppl']:.3f} "
      f"(base {d['ppl_base']:.3f}, ratio {d['ppl_ratio']:.3f}), greedy {g['exact']}/{g['prompts']} exact, "
      f"{100 * g['prefix_kept']:.1f} % of the prefix kept")
