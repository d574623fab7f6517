#!/usr/bin/env python3
"""real_eval_table.py WORK_DIR: docs/real-model.md's table rows from the
*.eval.json files scripts/real-eval.sh wrote, in its row order."""
import json
import os
import sys

ROWS = [
    ("w8a8-rtn", "`w8a8 --rtn`"),
    ("w8a8-gptq", "`w8a8` (GPTQ)"),
    ("w8a8-smooth0.5", "`w8a8 --smooth 0.5` (GPTQ)"),
    ("w4a8-rtn", "`gptq --group 64 --rtn` (W4A8)"),
    ("w4a8-gptq-inorder", "`gptq --group 64 --act-order=false` (W4A8, GPTQ)"),
    ("w4a8-gptq-actorder", "`gptq --group 64` (W4A8, GPTQ, act-order: the default)"),
    ("w4a16-rtn", "`w4a16 --group 64 --rtn`"),
    ("w4a16-gptq-inorder", "`w4a16 --group 64 --act-order=false` (GPTQ)"),
    ("w4a16-gptq-actorder", "`w4a16 --group 64` (GPTQ, act-order: the default)"),
    ("onnx-fp32", "`export-onnx` fp32, in ONNX Runtime"),
    ("onnx-fp16", "`export-onnx --dtype fp16`, in ONNX Runtime"),
    ("qnn-w8a16", "`qnn-bundle --precision w8a16`, simulated in ONNX Runtime"),
    ("qnn-w16a16", "`qnn-bundle --precision w16a16`, simulated in ONNX Runtime"),
]
print("| build | mean KLD | 99 % KLD | same top-1 | PPL ratio | greedy: exact, prefix kept |")
print("|---|---|---|---|---|---|")
for name, label in ROWS:
    p = os.path.join(sys.argv[1], name + ".eval.json")
    if not os.path.exists(p):
        continue
    d = json.load(open(p))
    k, g = d["kld"], d["greedy"]
    print(f"| {label} | {k['mean']:.4f} ± {k['stderr']:.4f} | {k['p99']:.3f} | {100 * d['same_top1']:.1f} ± {100 * d['same_top1_err']:.1f} % "
          f"| {d['ppl_ratio']:.3f} | {g['exact']}/{g['prompts']}, {100 * g['prefix_kept']:.1f} % |")
