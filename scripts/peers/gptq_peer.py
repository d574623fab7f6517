#!/usr/bin/env python3
"""gptq_peer.py: GPTQModel or AutoRound on the real model's Llama form, back in the Spark layout.

usage: gptq_peer.py PEER LLAMA_DIR CHUNKS SPARK_DIR WORK OUT

PEER:
  gptqmodel-descact-off, gptqmodel-descact-on: GPTQModel, QuantizeConfig(bits=4,
    group_size=64, sym=True, desc_act=False|True), every other setting its
    default; calibration: CHUNKS as they are (one sequence each, batch 1).
  autoround: AutoRound(bits=4, group_size=64, sym=True), its default 200
    iterations, on CPU (device_map="cpu"), saved in the auto_gptq format.
    AutoRound drops every calibration sequence shorter than its seqlen, so
    the same tokens are given as one stream cut into windows of 512
    (nsamples = tokens / 512): the same 8,192 tokens, other boundaries.
    AUTOROUND_ITERS=N in the environment overrides the iterations (a quick
    smoke test; peer.json records it).

The model is loaded in float32 (as sparkconv's calibration forward runs);
lm_head stays float (each tool's default). The saved checkpoint is loaded
back with GPTQModel's torch kernel (BACKEND.TORCH, float16: the kernel's
dtype and the GPTQ scales') and every quantized linear dequantized by its
own TorchLinear.dequantize_weight, then widened to float32,
checked against the module's own forward on random inputs, and OUT is
written in the Spark layout (spark_llama.spark_from_float). A JSON summary
goes to WORK/peer.json.
"""

import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spark_llama  # noqa: E402

# GPTQModel 7.7 sizes its CPU worker pool as (cores + 1) // 2 but its model
# loader asks for 2 workers of it, so on a machine of 2 or fewer cores
# GPTQModel.load fails: "ValueError: Virtual pool 'model_loader:cpu' requests
# 2 workers but parent 'cpu' only has 1" (gptqmodel/__init__.py). Its own
# override, GPTQMODEL_CPU_WORKERS, gives the pool the 2 it asks for.
if (os.cpu_count() or 1) <= 2:
    os.environ.setdefault("GPTQMODEL_CPU_WORKERS", "2")

SEQLEN = 512


def chunks(path):
    return [json.loads(line)["ids"] for line in open(path)]


def run_gptqmodel(desc_act, llama_dir, ids, saved):
    from gptqmodel import GPTQModel, QuantizeConfig
    qc = QuantizeConfig(bits=4, group_size=64, sym=True, desc_act=desc_act)
    model = GPTQModel.load(llama_dir, qc, dtype=torch.float32, device="cpu")
    model.quantize([{"input_ids": x, "attention_mask": [1] * len(x)} for x in ids], batch_size=1)
    model.save(saved)


def run_autoround(llama_dir, ids, saved):
    from auto_round import AutoRound
    from transformers import AutoModelForCausalLM, AutoTokenizer
    stream = [t for x in ids for t in x]
    n = len(stream) // SEQLEN
    windows = torch.tensor(stream[: n * SEQLEN]).reshape(n, SEQLEN)
    model = AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(llama_dir)
    kw = {"iters": int(os.environ["AUTOROUND_ITERS"])} if "AUTOROUND_ITERS" in os.environ else {}
    ar = AutoRound(model, tok, bits=4, group_size=64, sym=True, dataset=[{"input_ids": w[None]} for w in windows],
                   nsamples=n, seqlen=SEQLEN, device_map="cpu", **kw)
    ar.quantize_and_save(saved, format="auto_gptq")
    return n, kw.get("iters", "default (200)")


def saved_folder(saved):
    """The folder holding the saved config.json: AutoRound writes into a
    subfolder named after the model and scheme (llama-w4g64)."""
    found = [d for d, _, files in os.walk(saved) if "config.json" in files]
    if len(found) != 1:
        sys.exit(f"gptq_peer.py: {saved}: expected one saved checkpoint, found {found}")
    return found[0]


def dequantized(saved):
    """Llama-named float32 numpy weights of a saved GPTQ checkpoint, each
    quantized linear dequantized by GPTQModel's TorchLinear."""
    from gptqmodel import BACKEND, GPTQModel
    from gptqmodel.nn_modules.qlinear.torch import TorchLinear
    # TorchLinear runs in float16 or bfloat16 only: float16, the GPTQ scales' dtype
    m = GPTQModel.load(saved, backend=BACKEND.TORCH, device="cpu", dtype=torch.float16)
    m.model.eval()
    out, done = {}, set()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, mod in m.model.named_modules():
            if not isinstance(mod, TorchLinear):
                continue
            w = TorchLinear.dequantize_weight(mod).float().T.contiguous()  # [in, out] -> [out, in]
            if tuple(w.shape) != (mod.out_features, mod.in_features):
                sys.exit(f"gptq_peer.py: {name}: dequantized shape {tuple(w.shape)}")
            x = torch.randn(4, mod.in_features, generator=gen).half()
            y, ref = mod(x).float(), x.float() @ w.T
            if not torch.allclose(y, ref, rtol=1e-2, atol=1e-2 * float(ref.abs().max())):
                sys.exit(f"gptq_peer.py: {name}: its forward differs from x @ dequantized weight by {float((y - ref).abs().max())}")
            out[name + ".weight"] = w.numpy()
            done.add(name)
        for name, p in m.model.state_dict().items():
            mod = name.rpartition(".")[0]
            if mod not in done and p.dtype.is_floating_point:
                out[name] = p.float().numpy()
    if len(done) != 7 * 30:
        sys.exit(f"gptq_peer.py: {len(done)} quantized linears, expected 210")
    return out


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    peer = sys.argv[1]
    llama_dir, chunks_file, spark_dir, work, out = map(os.path.abspath, sys.argv[2:])
    os.chdir(work)  # GPTQModel writes its logs/ into the working folder
    torch.manual_seed(0)
    ids = chunks(chunks_file)
    saved = os.path.join(work, "saved")
    t0 = time.time()
    info = {"calibration_chunks": len(ids), "calibration_tokens": sum(map(len, ids))}
    if peer in ("gptqmodel-descact-off", "gptqmodel-descact-on"):
        run_gptqmodel(peer.endswith("-on"), llama_dir, ids, saved)
    elif peer == "autoround":
        info["calibration_windows"], info["iters"] = run_autoround(llama_dir, ids, saved)
    else:
        sys.exit(f"gptq_peer.py: unknown peer {peer} (gptqmodel-descact-off, gptqmodel-descact-on, autoround)")
    info["quantize_s"] = round(time.time() - t0, 1)
    saved = saved_folder(saved)
    llama = dequantized(saved)
    # the tied head: lm_head is the embedding; the Spark layout has none
    llama.pop("lm_head.weight", None)
    spark_llama.spark_from_float(spark_dir, out, llama)
    import auto_round
    import gptqmodel
    info.update({"tool": "AutoRound" if peer == "autoround" else "GPTQModel", "peer": peer,
                 "version": auto_round.__version__ if peer == "autoround" else gptqmodel.__version__,
                 "torch": torch.__version__,
                 "quantization_config": json.load(open(os.path.join(saved, "config.json"))).get("quantization_config")})
    spark_llama.write_json(os.path.join(work, "peer.json"), info)


if __name__ == "__main__":
    main()
