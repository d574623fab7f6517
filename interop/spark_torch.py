"""Spark-X2.5 in plain PyTorch, written from the model description (DESIGN:
hybrid sliding/full attention, per-layer-type partial RoPE, head-wise
sigmoid gate g_proj, GEGLU with exact GELU, tied or untied head), as a user
would build it to load a sparkconv checkpoint. Linears are nn.Linear named as
the checkpoint's tensors, so a loader can swap them for quantized modules.
"""

import math

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, n, eps, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n, dtype=dtype))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


def rope_tables(positions, dims, theta):
    j = torch.arange(dims // 2, dtype=torch.float64)
    ang = positions.double()[:, None] * theta ** (-2.0 * j / dims)
    return torch.cos(ang), torch.sin(ang)


def apply_rope(x, cos, sin, dims):
    # x [T, heads, D]; NeoX rotate_half over the first dims.
    r, rest = x[..., :dims].double(), x[..., dims:]
    x1, x2 = r[..., : dims // 2], r[..., dims // 2 :]
    c, s = cos[:, None, :], sin[:, None, :]
    out = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype)
    return torch.cat((out, rest), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg, layer_type, dtype):
        super().__init__()
        h, d = cfg["hidden_size"], cfg["head_dim"]
        self.nq, self.nkv, self.d = cfg["num_attention_heads"], cfg["num_key_value_heads"], d
        self.q_k_v_proj = nn.Linear(h, (self.nq + 2 * self.nkv) * d, bias=False, dtype=dtype)
        self.g_proj = nn.Linear(h, self.nq, bias=False, dtype=dtype)
        self.o_proj = nn.Linear(self.nq * d, h, bias=False, dtype=dtype)
        if layer_type == "sliding_attention":
            self.window = cfg["sliding_window"]
            partial = cfg.get("sliding_partial_rotary_factor", 1.0)
            self.theta = cfg["sliding_rope_theta"]
        else:
            self.window = None
            partial = cfg["partial_rotary_factor"]
            self.theta = cfg["rope_theta"]
        self.rot = int(d * partial)

    def forward(self, x):
        t = x.shape[0]
        qkv = self.q_k_v_proj(x)
        q, k, v = qkv.split([self.nq * self.d, self.nkv * self.d, self.nkv * self.d], dim=-1)
        q, k, v = q.reshape(t, self.nq, self.d), k.reshape(t, self.nkv, self.d), v.reshape(t, self.nkv, self.d)
        cos, sin = rope_tables(torch.arange(t), self.rot, self.theta)
        q, k = apply_rope(q, cos, sin, self.rot), apply_rope(k, cos, sin, self.rot)
        rep = self.nq // self.nkv
        kk, vv = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q.float(), kk.float()) / math.sqrt(self.d)
        i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
        allowed = j <= i
        if self.window is not None:
            allowed &= j > i - self.window
        scores = scores.masked_fill(~allowed, float("-inf"))
        a = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), vv.float()).to(x.dtype)
        gate = torch.sigmoid(self.g_proj(x).float()).to(x.dtype)
        a = a * gate[..., None]
        return self.o_proj(a.reshape(t, self.nq * self.d))


class MLP(nn.Module):
    def __init__(self, cfg, dtype):
        super().__init__()
        h, i = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(h, i, bias=False, dtype=dtype)
        self.up_proj = nn.Linear(h, i, bias=False, dtype=dtype)
        self.down_proj = nn.Linear(i, h, bias=False, dtype=dtype)
        self.tanh = cfg.get("hidden_act", "gelu") == "gelu_pytorch_tanh"

    def forward(self, x):
        g = nn.functional.gelu(self.gate_proj(x), approximate="tanh" if self.tanh else "none")
        return self.down_proj(g * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg, layer_type, dtype):
        super().__init__()
        eps = cfg["rms_norm_eps"]
        self.input_layernorm = RMSNorm(cfg["hidden_size"], eps, dtype)
        self.self_attn = Attention(cfg, layer_type, dtype)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], eps, dtype)
        self.mlp = MLP(cfg, dtype)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    def __init__(self, cfg, dtype):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"], dtype=dtype)
        self.layers = nn.ModuleList(Layer(cfg, lt, dtype) for lt in cfg["layer_types"])
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"], dtype)


class SparkForCausalLM(nn.Module):
    """forward(ids [T]) -> logits [T, V] in float32."""

    def __init__(self, cfg, dtype=torch.bfloat16):
        super().__init__()
        self.model = Body(cfg, dtype)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False, dtype=dtype)
        if cfg.get("tie_word_embeddings", True):
            self.lm_head.weight = self.model.embed_tokens.weight

    @torch.no_grad()
    def forward(self, ids):
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x)
        return self.lm_head(self.model.norm(x)).float()
