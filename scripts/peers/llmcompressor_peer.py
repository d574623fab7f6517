#!/usr/bin/env python3
"""llmcompressor_peer.py: llm-compressor's oneshot on the real model's Llama form, back in the Spark layout.

usage: llmcompressor_peer.py RECIPE LLAMA_DIR CHUNKS SPARK_DIR WORK OUT

RECIPE: w4a16-sym | w4a16-asym (GPTQModifier, 4-bit, group 64) or w8a8-sq
(SmoothQuantModifier(smoothing_strength=0.8), then GPTQModifier with the
W8A8 preset: int8 per-channel weights, int8 per-token dynamic activations).
Every other setting is llm-compressor's default (GPTQ: actorder static,
dampening_frac 0.01, block_size 128; lm_head ignored). The model is loaded in
float32; the calibration set is CHUNKS (calibtokens' JSON lines: sparkconv's
own chunks, one sequence each).

oneshot saves its compressed-tensors checkpoint to WORK/saved; the weights
are then read back from those files: 4-bit ones dequantized by
compressed-tensors' own PackedQuantizationCompressor.decompress (float32),
int8 ones kept as codes and scales. OUT is written in the Spark layout
(spark_llama.spark_from_float / spark_from_w8a8). A JSON summary (versions,
settings, seconds) goes to WORK/peer.json.
"""

import glob
import json
import os
import sys
import time

import torch
from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
from compressed_tensors.quantization import QuantizationArgs, QuantizationConfig, QuantizationScheme
from datasets import Dataset
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

import compressed_tensors
import llmcompressor
from llmcompressor import oneshot
from llmcompressor.modifiers.quantization import GPTQModifier
from llmcompressor.modifiers.smoothquant import SmoothQuantModifier

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spark_llama  # noqa: E402


def recipe(name):
    if name in ("w4a16-sym", "w4a16-asym"):
        w = QuantizationArgs(num_bits=4, type="int", strategy="group", group_size=64, symmetric=name == "w4a16-sym")
        return [GPTQModifier(ignore=["lm_head"], config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=w)})]
    if name == "w8a8-sq":
        return [SmoothQuantModifier(smoothing_strength=0.8), GPTQModifier(targets="Linear", scheme="W8A8", ignore=["lm_head"])]
    sys.exit(f"llmcompressor_peer.py: unknown recipe {name} (w4a16-sym, w4a16-asym, w8a8-sq)")


def read_chunks(path):
    ids = [json.loads(line)["ids"] for line in open(path)]
    return Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(x) for x in ids]}), sum(map(len, ids))


def saved_tensors(folder):
    sd = {}
    for f in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        sd.update(load_file(f))
    qc = json.load(open(os.path.join(folder, "config.json")))["quantization_config"]
    return sd, qc


def dequantized(sd, qc):
    """Llama-named float32 numpy weights: packed 4-bit modules decompressed by
    compressed-tensors, the rest as saved."""
    if qc["format"] != "pack-quantized" or len(qc["config_groups"]) != 1:
        sys.exit(f"llmcompressor_peer.py: expected one pack-quantized config group, got {qc['format']}")
    scheme = QuantizationScheme.model_validate(next(iter(qc["config_groups"].values())))
    out = {}
    for name in [n for n in sd if n.endswith(".weight_packed")]:
        mod = name[: -len(".weight_packed")]
        local = {k[len(mod) + 1:]: sd.pop(k) for k in list(sd) if k.startswith(mod + ".")}
        if "weight_g_idx" in local:
            sys.exit(f"llmcompressor_peer.py: {mod} has a g_idx (group act-order), which this mapping does not apply")
        out[mod + ".weight"] = PackedQuantizationCompressor.decompress(local, scheme)["weight"].float().numpy()
    for k, v in sd.items():
        out[k] = v.float().numpy()
    return out


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    name, llama_dir, chunks, spark_dir, work, out = sys.argv[1:]
    torch.manual_seed(0)
    ds, tokens = read_chunks(chunks)
    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32)
    saved = os.path.join(work, "saved")
    oneshot(model=model, dataset=ds, recipe=recipe(name), max_seq_length=512, num_calibration_samples=len(ds),
            output_dir=saved)
    quant_s = time.time() - t0
    sd, qc = saved_tensors(saved)
    if name == "w8a8-sq":
        if qc["format"] != "int-quantized":
            sys.exit(f"llmcompressor_peer.py: expected format int-quantized, got {qc['format']}")
        llama = {k: (v.numpy() if v.dtype == torch.int8 else v.float().numpy()) for k, v in sd.items()}
        spark_llama.spark_from_w8a8(spark_dir, out, llama, qc)
    else:
        spark_llama.spark_from_float(spark_dir, out, dequantized(sd, qc))
    spark_llama.write_json(os.path.join(work, "peer.json"), {
        "tool": "llm-compressor", "version": llmcompressor.__version__, "compressed_tensors": compressed_tensors.__version__,
        "torch": torch.__version__, "recipe": name, "calibration_chunks": len(ds), "calibration_tokens": tokens,
        "quantize_s": round(quant_s, 1), "quantization_config": qc})


if __name__ == "__main__":
    main()
