#!/usr/bin/env python3
"""table.py: the peers table from scripts/peers/run.sh's work folder.

usage: table.py WORK_DIR        the markdown table (docs/benchmarks.md#peers-on-cpu), also WORK_DIR/results.json
       table.py --row EVAL_JSON one line for one score
"""

import glob
import json
import os
import re
import sys

ROWS = [  # name, build label, settings
    ("sparkconv-w4a16", "sparkconv `w4a16 --group 64 --quant-head`", "GPTQ, act-order, asymmetric float-zero grid, head quantized; bf16 activations"),
    ("sparkconv-w4a16-weights", "the same, weights only", "its dequantized weights as a float32 checkpoint"),
    ("sparkconv-gptq", "sparkconv `gptq --group 64 --quant-head`", "GPTQ, act-order, symmetric grid, head quantized; int8 activations (W4A8)"),
    ("sparkconv-gptq-weights", "the same, weights only", "its dequantized weights as a float32 checkpoint"),
    ("sparkconv-w4a16-head", "sparkconv `w4a16 --group 64`", "its defaults: float target 0.25 on the whole corpus, act-order, asymmetric float-zero grid, head bf16; bf16 activations"),
    ("sparkconv-w4a16-head-weights", "the same, weights only", "its dequantized weights as a float32 checkpoint"),
    ("sparkconv-gptq-head", "sparkconv `gptq --group 64`", "its defaults: float target 0.25 on the whole corpus, act-order, symmetric grid, head bf16; int8 activations (W4A8)"),
    ("sparkconv-gptq-head-weights", "the same, weights only", "its dequantized weights as a float32 checkpoint"),
    ("sparkconv-gptq-head-8k", "sparkconv `gptq --group 64 --tokens 8192`", "the peers' 8,192 calibration tokens, float target 0.25; int8 activations (W4A8)"),
    ("sparkconv-gptq-head-8k-weights", "the same, weights only", "its dequantized weights as a float32 checkpoint"),
    ("sparkconv-rotate-w8a8", "sparkconv `rotate`, then `w8a8`", "rotation, SmoothQuant on down_proj, GPTQ int8"),
    ("llmcompressor-w4a16-sym", "llm-compressor GPTQ W4A16 sym", "GPTQModifier, 4-bit g64 symmetric, defaults (actorder static, damp 0.01)"),
    ("llmcompressor-w4a16-asym", "llm-compressor GPTQ W4A16 asym", "GPTQModifier, 4-bit g64 asymmetric, defaults"),
    ("llmcompressor-w8a8-sq", "llm-compressor SmoothQuant + GPTQ W8A8", "SmoothQuantModifier 0.8, GPTQModifier W8A8 preset"),
    ("gptqmodel-descact-off", "GPTQModel 4-bit sym, desc_act off", "QuantizeConfig(bits=4, group_size=64, sym=True, desc_act=False)"),
    ("gptqmodel-descact-on", "GPTQModel 4-bit sym, desc_act on", "QuantizeConfig(bits=4, group_size=64, sym=True, desc_act=True)"),
    ("autoround-w4-sym", "AutoRound W4 sym", "bits=4, group_size=64, sym=True, 200 iterations (default)"),
]
SETS = ("heldout", "heldout-agent")


def score(path):
    d = json.load(open(path))
    k = d["kld"]
    return {"kld": k["mean"], "kld_err": k["stderr"], "top1": d["same_top1"], "ppl_ratio": d["ppl_ratio"], "tokens": d.get("tokens_scored")}


def fmt_score(s):
    return f"{s['kld']:.4f} ± {s['kld_err']:.4f} / {100 * s['top1']:.1f} % / {s['ppl_ratio']:.3f}"


def timing(path):
    """wall s, CPU s (user + sys) and peak RSS MiB from /usr/bin/time -v."""
    t = open(path).read()
    get = lambda key: re.search(re.escape(key) + r": (.+)", t).group(1).strip()
    wall = 0.0
    for part in get("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":"):
        wall = wall * 60 + float(part)
    return {"wall_s": wall, "cpu_s": float(get("User time (seconds)")) + float(get("System time (seconds)")),
            "peak_rss_mib": int(get("Maximum resident set size (kbytes)")) / 1024}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--row":
        print(f"{os.path.basename(sys.argv[2])}: mean KLD / same top-1 / PPL ratio {fmt_score(score(sys.argv[2]))}")
        return
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    work = sys.argv[1]
    results = {"rows": []}
    check = os.path.join(work, "check-llama.json")
    if os.path.exists(check):
        results["llama_form_check"] = json.load(open(check))
    print("| build (group 64) | version | wall s | CPU s | peak RSS | heldout: mean KLD / same top-1 / PPL ratio | heldout-agent: the same |")
    print("|---|---|---|---|---|---|---|")
    for name, label, settings in ROWS:
        row = {"name": name, "build": label, "settings": settings}
        base = name.removesuffix("-weights")
        if os.path.exists(os.path.join(work, base + ".time")):
            row.update(timing(os.path.join(work, base + ".time")))
        peer = os.path.join(work, base + ".work", "peer.json")
        if os.path.exists(peer):
            p = json.load(open(peer))
            row["version"] = f"{p['tool']} {p['version']}"
            row["peer"] = {k: p[k] for k in p if k != "quantization_config"}
        for s in SETS:
            f = os.path.join(work, f"{name}.{s}.eval.json")
            if os.path.exists(f):
                row[s] = score(f)
        if not any(s in row for s in SETS):
            continue
        results["rows"].append(row)
        same = name.endswith("-weights")
        cells = ["", "", ""] if same else [f"{row['wall_s']:.0f}", f"{row['cpu_s']:.0f}", f"{row['peak_rss_mib']:.0f} MiB"]
        print(f"| {label} | {row.get('version', 'sparkconv')} | {' | '.join(cells)} | "
              + " | ".join(fmt_score(row[s]) if s in row else "not run" for s in SETS) + " |")
    with open(os.path.join(work, "results.json.tmp"), "w") as f:
        json.dump(results, f, indent=2)
    os.rename(os.path.join(work, "results.json.tmp"), os.path.join(work, "results.json"))
    errs = sorted(glob.glob(os.path.join(work, "*.failed")))
    for e in errs:
        print(f"\n{os.path.basename(e)}: {open(e).read().strip()}")


if __name__ == "__main__":
    main()
