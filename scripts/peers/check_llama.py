#!/usr/bin/env python3
"""check_llama.py: is transformers' LlamaForCausalLM on the Llama form the Spark model?

usage: check_llama.py SPARKCONV SPARK_DIR LLAMA_DIR IDS_FILE OUT_JSON

Runs transformers' LlamaForCausalLM (float32, eager attention) on the Llama
form (spark_llama.to_llama) and `sparkconv forward --dump` on the Spark
checkpoint over the same prompts: windows of 512, 300 and 37 tokens of the
held-out ids. Writes, per prompt and over all, the max abs difference of the
logits, their SNR in dB (signal: sparkconv's logits) and how many positions
agree on the top-1 token; exits 1 when a prompt's SNR is under 80 dB or any
top-1 differs (the two are the same function up to float32 rounding).
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spark_llama  # noqa: E402


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    sparkconv, spark_dir, llama_dir, ids_file, out = sys.argv[1:]
    ids = [int(x) for x in open(ids_file).read().split()]
    prompts = [ids[0:512], ids[5000:5300], ids[12000:12037]]
    model = transformers.LlamaForCausalLM.from_pretrained(llama_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    rows, num, den = [], 0.0, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for k, p in enumerate(prompts):
            dump = os.path.join(tmp, f"dump{k}.safetensors")
            subprocess.run([sparkconv, "forward", "--model", spark_dir, "--ids", ",".join(map(str, p)), "--dump", dump],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            ref = spark_llama.read_safetensors(dump)[0]["logits"].astype(np.float64)
            with torch.no_grad():
                got = model(torch.tensor([p])).logits[0].double().numpy()
            err = got - ref
            num_k, den_k = float((err ** 2).sum()), float((ref ** 2).sum())
            num, den = num + num_k, den + den_k
            rows.append({"tokens": len(p), "max_abs_diff": float(np.abs(err).max()),
                         "snr_db": 10 * np.log10(den_k / num_k) if num_k else float("inf"),
                         "top1_same": int((got.argmax(-1) == ref.argmax(-1)).sum())})
    res = {"transformers": transformers.__version__, "torch": torch.__version__, "prompts": rows,
           "max_abs_diff": max(r["max_abs_diff"] for r in rows), "snr_db": 10 * np.log10(den / num) if num else float("inf"),
           "positions": sum(r["tokens"] for r in rows), "top1_same": sum(r["top1_same"] for r in rows)}
    spark_llama.write_json(out, res)
    print(json.dumps(res))
    if any(r["snr_db"] < 80 or r["top1_same"] != r["tokens"] for r in rows):
        sys.exit("check_llama.py: the Llama form does not compute the Spark model")


if __name__ == "__main__":
    main()
