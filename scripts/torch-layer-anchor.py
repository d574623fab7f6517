#!/usr/bin/env python3
"""PyTorch anchor for the forward benchmarks: one full-size Spark-X2.5 layer.

Runs the layer of the model card's "one layer, exactly" (hidden 2048, q/k/v
2048/512/512 fused, 8 query heads and 2 KV heads of 256, partial RoPE over 64
dims, head-wise sigmoid output gate g_proj [8, 2048], GEGLU MLP with erf GELU,
intermediate 6656) with random N(0, 0.02) weights, as a PyTorch user would run
it on a CPU: torch.nn.functional linears and scaled_dot_product_attention, the
weights and activations in the chosen dtype (bf16 or fp32).

Measures, with torch.set_num_threads(THREADS):
  prefill  T tokens (default 512) through the layer, sliding (window 512,
           explicit mask) and full (is_causal) attention;
  decode   one token through the layer against a 511-entry KV cache.
Each figure is the median of --runs timed runs after --warmup untimed ones.

Compare with sparkconv's `go test ./forward -bench 'LayerPrefill|DecodeLayer'`
(same shapes, same thread count: GOMAXPROCS=2). Usage:

  python scripts/torch-layer-anchor.py --dtype bf16 --threads 2 --json
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F

H, I, NH, KV, D = 2048, 6656, 8, 2, 256
QD, KVD = NH * D, KV * D
WINDOW = 512
ROT = D // 4  # partial_rotary_factor 0.25


def rope_tables(T, theta, pos0=0):
    inv = theta ** (-torch.arange(0, ROT, 2, dtype=torch.float64) / ROT)
    ang = torch.arange(pos0, pos0 + T, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def rotate(x, cos, sin):
    # x [T, heads, D]; NeoX rotate_half over the first ROT dims.
    r, rest = x[..., :ROT], x[..., ROT:]
    a, b = r[..., : ROT // 2], r[..., ROT // 2:]
    c, s = cos[:, None, :].to(x.dtype), sin[:, None, :].to(x.dtype)
    return torch.cat([a * c - b * s, b * c + a * s, rest], dim=-1)


def rmsnorm(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


class Layer:
    def __init__(self, dtype, seed=0):
        g = torch.Generator().manual_seed(seed)

        def w(*shape):
            return (0.02 * torch.randn(*shape, generator=g)).to(dtype)

        self.in_norm = (1 + 0.1 * torch.randn(H, generator=g)).to(dtype)
        self.post_norm = (1 + 0.1 * torch.randn(H, generator=g)).to(dtype)
        self.qkv = w(QD + 2 * KVD, H)
        self.g = w(NH, H)
        self.o = w(H, QD)
        self.gate = w(I, H)
        self.up = w(I, H)
        self.down = w(H, I)
        self.dtype = dtype

    def attention_block(self, x, cos, sin, k_cache, v_cache, mask, causal):
        T = x.shape[0]
        h = rmsnorm(x, self.in_norm)
        qkv = F.linear(h, self.qkv)
        q, k, v = qkv.split([QD, KVD, KVD], dim=-1)
        q = rotate(q.view(T, NH, D), cos, sin)
        k = rotate(k.view(T, KV, D), cos, sin)
        v = v.view(T, KV, D)
        if k_cache is not None:
            k = torch.cat([k_cache, k], dim=0)
            v = torch.cat([v_cache, v], dim=0)
        # [heads, T, D] with GQA expanded as a user of SDPA does.
        qh = q.transpose(0, 1)
        kh = k.transpose(0, 1).repeat_interleave(NH // KV, dim=0)
        vh = v.transpose(0, 1).repeat_interleave(NH // KV, dim=0)
        a = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, is_causal=causal)
        a = a.transpose(0, 1)  # [T, NH, D]
        gate = torch.sigmoid(F.linear(h, self.g))
        a = (a * gate[..., None]).reshape(T, QD)
        return x + F.linear(a, self.o)

    def mlp_block(self, x):
        h2 = rmsnorm(x, self.post_norm)
        return x + F.linear(F.gelu(F.linear(h2, self.gate)) * F.linear(h2, self.up), self.down)

    def prefill(self, x, sliding):
        T = x.shape[0]
        cos, sin = rope_tables(T, 1e4 if sliding else 5e6)
        mask, causal = None, True
        if sliding:
            p = torch.arange(T)
            mask = (p[None, :] <= p[:, None]) & (p[None, :] > p[:, None] - WINDOW)
            causal = False
        return self.mlp_block(self.attention_block(x, cos, sin, None, None, mask, causal))

    def decode(self, x, k_cache, v_cache, pos):
        cos, sin = rope_tables(1, 1e4, pos)
        return self.mlp_block(self.attention_block(x, cos, sin, k_cache, v_cache, None, False))


def median_seconds(fn, warmup, runs):
    """Median wall seconds of runs calls (after warmup ones), the list, and
    the median CPU seconds of this process per call (on a shared machine
    the per-CPU-second rate is the steadier one)."""
    for _ in range(warmup):
        fn()
    ts, cs = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        ts.append(time.perf_counter() - t0)
        cs.append(time.process_time() - c0)
    return statistics.median(ts), ts, statistics.median(cs)


def layer_flops(T, sliding):
    lin = 2 * T * (H * (QD + 2 * KVD) + H * NH + QD * H + 3 * H * I)
    keys = sum(p - (max(0, p - WINDOW + 1) if sliding else 0) + 1 for p in range(T))
    return lin + 4 * keys * NH * D


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    layer = Layer(dtype)
    g = torch.Generator().manual_seed(1)
    x = (0.02 * torch.randn(a.tokens, H, generator=g)).to(dtype)
    out = {"torch": torch.__version__, "dtype": a.dtype, "threads": a.threads,
           "cpu_capability": torch.backends.cpu.get_cpu_capability(), "tokens": a.tokens}
    with torch.inference_mode():
        for kind in ["sliding", "full"]:
            sec, ts, cpu = median_seconds(lambda: layer.prefill(x, kind == "sliding"), a.warmup, a.runs)
            fl = layer_flops(a.tokens, kind == "sliding")
            out[f"prefill_{kind}"] = {"seconds": sec, "tokens_per_s": a.tokens / sec,
                                      "gflop_per_s": fl / sec / 1e9, "cpu_seconds": cpu,
                                      "tokens_per_cpu_s": a.tokens / cpu, "gflop_per_cpu_s": fl / cpu / 1e9,
                                      "runs": ts}
        kc = (0.5 * torch.randn(WINDOW - 1, KV, D, generator=g)).to(dtype)
        vc = (0.5 * torch.randn(WINDOW - 1, KV, D, generator=g)).to(dtype)
        x1 = x[:1].clone()
        sec, ts, cpu = median_seconds(lambda: layer.decode(x1, kc, vc, 600), 3 * a.warmup, 4 * a.runs)
        wbytes = sum(t.numel() * t.element_size() for t in
                     [layer.qkv, layer.g, layer.o, layer.gate, layer.up, layer.down])
        out["decode"] = {"seconds": sec, "tokens_per_s": 1 / sec, "weight_gb_per_s": wbytes / sec / 1e9,
                         "cpu_seconds": cpu, "tokens_per_cpu_s": 1 / cpu, "runs": ts}
    if a.json:
        print(json.dumps(out))
        return
    for k in ["prefill_sliding", "prefill_full"]:
        print(f"{a.dtype} {k}: {out[k]['tokens_per_s']:.1f} tokens/s ({out[k]['gflop_per_s']:.1f} GFLOP/s), "
              f"{out[k]['tokens_per_cpu_s']:.1f} tokens per CPU-s")
    d = out["decode"]
    print(f"{a.dtype} decode: {d['tokens_per_s']:.1f} tokens/s ({d['weight_gb_per_s']:.2f} GB/s of weights), "
          f"{d['tokens_per_cpu_s']:.1f} tokens per CPU-s")


if __name__ == "__main__":
    main()
