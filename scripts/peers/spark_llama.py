"""spark_llama.py: the real model's Llama form, and peers' outputs back in the Spark layout.

The real model (docs/real-model.md) is SmolLM2 in the Spark layout. For
sequences of at most sliding_window (512) tokens, transformers'
LlamaForCausalLM computes exactly the Spark model when:

- hidden_act is "gelu": LlamaMLP is down(act(gate(x)) * up(x)) and "gelu" in
  transformers' ACT2FN is the exact erf GELU, Spark's GEGLU;
- q_proj, k_proj, v_proj are the rows of Spark's q_k_v_proj (no RoPE
  permutation: both rotate halves);
- o_proj is Spark's o_proj / 2: Spark's g_proj is zero, so its head gate
  sigmoid(0) is exactly 0.5 (a power of two: exact in bf16);
- full rotary with rope_theta, tied embeddings and rms_norm_eps as the config
  says.

to_llama writes that form; spark_from_float and spark_from_w8a8 write a
peer's result back (the inverse mapping) as a checkpoint `sparkconv eval
--model` reads. check_llama.py measures the equivalence.
"""

import json
import os
import shutil

import numpy as np
import torch
from safetensors.torch import load_file, save_file

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")
LINEARS = ("self_attn.q_k_v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def read_safetensors(path):
    """All tensors of one safetensors file as numpy arrays (floats widened to
    float32 exactly, integers as stored); returns (tensors, dtypes)."""
    out, dtypes = {}, {}
    for name, t in load_file(path).items():
        dtypes[name] = str(t.dtype).removeprefix("torch.")
        out[name] = t.float().numpy() if t.dtype.is_floating_point else t.numpy()
    return out, dtypes


def is_bf16(a):
    """Whether every float32 value of a is exactly a bf16 value."""
    return not (np.ascontiguousarray(a, np.float32).view(np.uint32) & 0xFFFF).any()


def write_safetensors(path, tensors):
    """tensors: name -> (dtype, numpy array), dtype BF16 (float32 values
    that must be bf16-exact), F32 or I8. Written to a temporary name, fsynced
    and renamed."""
    conv = {"BF16": torch.bfloat16, "F32": torch.float32, "I8": torch.int8}
    out = {}
    for name, (dt, a) in tensors.items():
        if dt == "BF16" and not is_bf16(a):
            raise ValueError(f"{name}: values are not bf16-exact")
        out[name] = torch.from_numpy(np.ascontiguousarray(a)).to(conv[dt])
    tmp = path + ".tmp"
    save_file(out, tmp, metadata={"format": "pt"})
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.rename(tmp, path)


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.rename(tmp, path)


def spark_config(spark_dir):
    cfg = json.load(open(os.path.join(spark_dir, "config.json")))
    if cfg.get("model_type") != "spark2_5" or "quantization_config" in cfg:
        raise SystemExit(f"{spark_dir}: not a float Spark-X2.5 checkpoint")
    if cfg.get("hidden_act") != "gelu" or not cfg.get("tie_word_embeddings"):
        raise SystemExit(f"{spark_dir}: the Llama form needs hidden_act gelu and tied embeddings")
    if cfg.get("partial_rotary_factor", 1.0) != 1.0 or cfg.get("sliding_partial_rotary_factor", 1.0) != 1.0 \
            or cfg.get("sliding_rope_theta", cfg["rope_theta"]) != cfg["rope_theta"]:
        raise SystemExit(f"{spark_dir}: the Llama form needs full rotary with one rope_theta on every layer")
    return cfg


def llama_config(cfg):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg["vocab_size"],
        "hidden_size": cfg["hidden_size"],
        "intermediate_size": cfg["intermediate_size"],
        "num_hidden_layers": cfg["num_hidden_layers"],
        "num_attention_heads": cfg["num_attention_heads"],
        "num_key_value_heads": cfg["num_key_value_heads"],
        "head_dim": cfg["head_dim"],
        "hidden_act": "gelu",
        "rms_norm_eps": cfg["rms_norm_eps"],
        # The Spark model equals this one only up to its sliding window.
        "max_position_embeddings": cfg["sliding_window"],
        "rope_theta": cfg["rope_theta"],
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg["rope_theta"]},
        "tie_word_embeddings": True,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": cfg.get("bos_token_id"),
        "eos_token_id": cfg.get("eos_token_id"),
        "torch_dtype": "bfloat16",
        "dtype": "bfloat16",
    }


def qkv_rows(cfg):
    d = cfg["head_dim"]
    return cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d


def copy_tokenizer(src, dst):
    for f in TOKENIZER_FILES:
        if os.path.exists(os.path.join(src, f)):
            shutil.copyfile(os.path.join(src, f), os.path.join(dst, f))


def to_llama(spark_dir, out_dir):
    """Write the Llama form of a float Spark checkpoint into out_dir (bf16,
    every value exact: the split is a row slice, o_proj / 2 a power of two)."""
    cfg = spark_config(spark_dir)
    t, dt = read_safetensors(os.path.join(spark_dir, "model.safetensors"))
    if any(v != "bfloat16" for v in dt.values()):
        raise SystemExit(f"{spark_dir}: expected a bf16 checkpoint")
    q, kv = qkv_rows(cfg)
    out = {"model.embed_tokens.weight": t.pop("model.embed_tokens.weight"), "model.norm.weight": t.pop("model.norm.weight")}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        g = t.pop(p + "self_attn.g_proj.weight")
        if g.any():
            raise SystemExit(f"{spark_dir}: {p}self_attn.g_proj.weight is not zero: the head gate is not 0.5")
        qkv = t.pop(p + "self_attn.q_k_v_proj.weight")
        out[p + "self_attn.q_proj.weight"] = qkv[:q]
        out[p + "self_attn.k_proj.weight"] = qkv[q:q + kv]
        out[p + "self_attn.v_proj.weight"] = qkv[q + kv:]
        out[p + "self_attn.o_proj.weight"] = t.pop(p + "self_attn.o_proj.weight") * np.float32(0.5)
        for n in ("input_layernorm", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
            out[p + n + ".weight"] = t.pop(p + n + ".weight")
    if t:
        raise SystemExit(f"{spark_dir}: tensors the Llama form has no place for: {sorted(t)}")
    os.makedirs(out_dir)
    write_json(os.path.join(out_dir, "config.json"), llama_config(cfg))
    write_safetensors(os.path.join(out_dir, "model.safetensors"), {k: ("BF16", v) for k, v in out.items()})
    copy_tokenizer(spark_dir, out_dir)


def spark_tensors(cfg, llama, linear):
    """The Spark checkpoint's tensors from a Llama-named state dict of
    float32 numpy arrays: norms and the embedding as they are, each linear
    given by linear(spark_module, llama_parts, scale) -> {suffix: (dtype,
    array)}, where the Spark weight is the row concatenation of the parts
    times scale."""
    out = {"model.embed_tokens.weight": ("F32", llama["model.embed_tokens.weight"])}
    h = cfg["hidden_size"]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = ("F32", llama[p + "input_layernorm.weight"])
        parts = {
            "self_attn.q_k_v_proj": ([p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"], 1.0),
            "self_attn.o_proj": ([p + "self_attn.o_proj"], 2.0),
            "mlp.gate_proj": ([p + "mlp.gate_proj"], 1.0),
            "mlp.up_proj": ([p + "mlp.up_proj"], 1.0),
            "mlp.down_proj": ([p + "mlp.down_proj"], 1.0),
        }
        for mod in ("self_attn.q_k_v_proj", "self_attn.o_proj"):
            for suffix, v in linear(p + mod, *parts[mod]).items():
                out[p + mod + suffix] = v
        out[p + "self_attn.g_proj.weight"] = ("F32", np.zeros((cfg["num_attention_heads"], h), np.float32))
        out[p + "post_attention_layernorm.weight"] = ("F32", llama[p + "post_attention_layernorm.weight"])
        for mod in ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
            for suffix, v in linear(p + mod, *parts[mod]).items():
                out[p + mod + suffix] = v
    out["model.norm.weight"] = ("F32", llama["model.norm.weight"])
    return out


def finish(spark_dir, out_dir, tensors, quantization_config=None):
    cfg = spark_config(spark_dir)
    cfg["torch_dtype"] = "float32"
    if quantization_config is not None:
        cfg["quantization_config"] = quantization_config
    tmp = out_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    write_json(os.path.join(tmp, "config.json"), cfg)
    write_safetensors(os.path.join(tmp, "model.safetensors"), tensors)
    copy_tokenizer(spark_dir, tmp)
    os.rename(tmp, out_dir)


def spark_from_float(spark_dir, out_dir, llama):
    """A float32 Spark checkpoint from a Llama-named state dict of float32
    numpy weights (a weight-only peer's dequantized result)."""
    cfg = spark_config(spark_dir)

    def linear(mod, names, scale):
        w = np.concatenate([llama[n + ".weight"] for n in names], axis=0) * np.float32(scale)
        return {".weight": ("F32", w)}

    finish(spark_dir, out_dir, spark_tensors(cfg, llama, linear))


def spark_from_w8a8(spark_dir, out_dir, llama, quantization_config):
    """A compressed-tensors int-quantized Spark checkpoint (sparkconv's W8A8
    layout, read by convert/w8a8.go) from Llama-named int8 weights and
    per-channel float32 scales: q/k/v rows concatenate (each row keeps its
    scale), o_proj's scales double (its codes stay; Spark's input is half
    Llama's, which per-token int8 quantization of the input only rescales).
    The embedding is float32, so the activation dtype and the scales' dtype
    are float32: the activations go to int8 per token from float32."""
    cfg = spark_config(spark_dir)

    def linear(mod, names, scale):
        q = np.concatenate([llama[n + ".weight"] for n in names], axis=0)
        s = np.concatenate([llama[n + ".weight_scale"].reshape(-1, 1) for n in names], axis=0) * np.float32(scale)
        if q.dtype != np.int8:
            raise SystemExit(f"{mod}: expected int8 weights, got {q.dtype}")
        return {".weight": ("I8", q), ".weight_scale": ("F32", s.astype(np.float32))}

    qc = dict(quantization_config)
    qc["ignore"] = ["lm_head", "re:.*g_proj$"]
    finish(spark_dir, out_dir, spark_tensors(cfg, llama, linear), qc)
