#!/usr/bin/env python3
"""real_model.py: SmolLM2-135M-Instruct (a Q4_1 GGUF) as a Spark-layout checkpoint.

usage: real_model.py [--dither FRAC] [--qk-order rotate_half|gguf|inverse] GGUF OUT_DIR

Reads the GGUF with gguf-py (llama.cpp's reader, PyPI `gguf`), dequantizes
every tensor with gguf.quants.dequantize and writes OUT_DIR/config.json,
model.safetensors (bf16), tokenizer.json, tokenizer_config.json and
generation_config.json. The mapping, step by step, is docs/real-model.md.
Every file is written to a temporary name, fsynced and renamed; OUT_DIR must
not exist yet (the caller writes to a temporary folder and renames it).
"""

import json
import os
import struct
import sys

import gguf
import numpy as np

# silu(x) = x * sigmoid(x) ~= x * Phi(1.702 x) = 1.702 * gelu_erf(x / 1.702).
GELU_SILU = 1.702


def field(r, key):
    f = r.fields.get(key)
    if f is None:
        sys.exit(f"real_model.py: GGUF lacks metadata key {key}")
    return f.contents()


def unpermute(w, n_head, order="rotate_half"):
    """Undo convert_hf_to_gguf.py's permute of Q/K rows (llama.cpp's
    interleaved RoPE pairs) back to rotate_half order, per head. The other
    orders exist only to show that the sanity gate refuses them: "gguf"
    keeps the GGUF's row order, "inverse" applies the permute once more."""
    out, cols = w.shape
    hd = out // n_head
    if order == "gguf":
        return w
    if order == "inverse":
        return w.reshape(n_head, 2, hd // 2, cols).swapaxes(1, 2).reshape(out, cols)
    return w.reshape(n_head, hd // 2, 2, cols).swapaxes(1, 2).reshape(out, cols)


def bf16_bytes(a):
    """float32 -> bfloat16 bytes, round to nearest even (as torch does)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if not np.isfinite(a).all():
        raise ValueError("non-finite value")
    u = a.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16).tobytes()


def write_atomic(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


# --dither FRAC: add uniform noise of +-FRAC/2 of each Q4_1 block's step (its
# scale d) to every weight of that block, seeded by the tensor's name, so
# that the weights no longer sit on a 4-bit grid aligned with blocks of 32.
DITHER = 0.0


def deq(t):
    """One GGUF tensor dequantized to float32, numpy row-major [out, in]
    (GGUF shapes list ne0 = in first)."""
    a = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
    if DITHER and t.tensor_type == gguf.GGMLQuantizationType.Q4_1:
        # a Q4_1 block: fp16 d, fp16 m, 16 bytes of codes (32 weights)
        d = np.frombuffer(np.ascontiguousarray(t.data).tobytes(), dtype=np.uint8).reshape(-1, 20)[:, :2]
        d = np.ascontiguousarray(d).view(np.float16).astype(np.float32).reshape(-1)
        rng = np.random.default_rng(int.from_bytes(t.name.encode()[:8].ljust(8, b"\0"), "little") ^ len(t.name))
        noise = rng.uniform(-0.5, 0.5, size=a.size).astype(np.float32) * DITHER
        a = (a.reshape(-1, 32) + noise.reshape(-1, 32) * d[:, None]).reshape(a.shape)
    return a.reshape([int(x) for x in reversed(t.shape)])


def spark_tensors(r, cfg, qk_order):
    """(name, shape, make) for every Spark tensor in file order; make()
    dequantizes and maps that one tensor, so one tensor is held at a time."""
    g = {t.name: t for t in r.tensors}
    L, nh, nkv = cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hidden = cfg["hidden_size"]
    used = set()

    def take(name):
        if name not in g:
            sys.exit(f"real_model.py: GGUF lacks tensor {name}")
        used.add(name)
        return g[name]

    def shape(t):
        return [int(x) for x in reversed(t.shape)]

    def plain(name, scale=1.0):
        t = take(name)
        return shape(t), (lambda: deq(t) * scale if scale != 1.0 else deq(t))

    items = [("model.embed_tokens.weight",) + plain("token_embd.weight")]
    for i in range(L):
        b, p = f"blk.{i}.", f"model.layers.{i}."
        tq, tk, tv = take(b + "attn_q.weight"), take(b + "attn_k.weight"), take(b + "attn_v.weight")
        rows = shape(tq)[0] + shape(tk)[0] + shape(tv)[0]
        qkv = (lambda tq=tq, tk=tk, tv=tv: np.concatenate(
            [unpermute(deq(tq), nh, qk_order), unpermute(deq(tk), nkv, qk_order), deq(tv)], axis=0))
        items += [
            (p + "input_layernorm.weight",) + plain(b + "attn_norm.weight"),
            (p + "self_attn.q_k_v_proj.weight", [rows, hidden], qkv),
            (p + "self_attn.g_proj.weight", [nh, hidden], lambda: np.zeros((nh, hidden), np.float32)),
            (p + "self_attn.o_proj.weight",) + plain(b + "attn_output.weight", 2.0),
            (p + "post_attention_layernorm.weight",) + plain(b + "ffn_norm.weight"),
            (p + "mlp.gate_proj.weight",) + plain(b + "ffn_gate.weight", 1.0 / GELU_SILU),
            (p + "mlp.up_proj.weight",) + plain(b + "ffn_up.weight", GELU_SILU),
            (p + "mlp.down_proj.weight",) + plain(b + "ffn_down.weight"),
        ]
    items.append(("model.norm.weight",) + plain("output_norm.weight"))
    left = sorted(set(g) - used)
    if left:
        sys.exit(f"real_model.py: GGUF tensors not mapped: {left}")
    return items


def write_safetensors(path, items):
    """The header from the shapes, then each tensor made, converted and
    written on its own."""
    header, off = {}, 0
    for name, shape, _ in items:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
        off += n
    header["__metadata__"] = {"format": "pt"}
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for name, shape, make in items:
            a = make()
            if list(a.shape) != shape:
                sys.exit(f"real_model.py: tensor {name}: shape {list(a.shape)}, header says {shape}")
            try:
                f.write(bf16_bytes(a))
            except ValueError as e:
                sys.exit(f"real_model.py: tensor {name}: {e}")
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


def config(r):
    L = int(field(r, "llama.block_count"))
    nh = int(field(r, "llama.attention.head_count"))
    hidden = int(field(r, "llama.embedding_length"))
    rot = int(field(r, "llama.rope.dimension_count"))
    if rot != hidden // nh:
        sys.exit(f"real_model.py: llama.rope.dimension_count {rot} is not head_dim {hidden // nh}: partial RoPE is not mapped")
    theta = float(field(r, "llama.rope.freq_base"))
    if "output.weight" in {t.name for t in r.tensors}:
        sys.exit("real_model.py: the GGUF has output.weight (untied head): not mapped")
    types = ["full_attention" if i % 4 == 3 else "sliding_attention" for i in range(L)]
    return {
        "architectures": ["Spark2_5ForCausalLM"],
        "model_type": "spark2_5",
        "vocab_size": len(field(r, "tokenizer.ggml.tokens")),
        "hidden_size": hidden,
        "intermediate_size": int(field(r, "llama.feed_forward_length")),
        "num_hidden_layers": L,
        "num_attention_heads": nh,
        "num_key_value_heads": int(field(r, "llama.attention.head_count_kv")),
        "head_dim": hidden // nh,
        "hidden_act": "gelu",
        # the GGUF stores 1e-5 as float32 (9.99999975e-06); the model's value is 1e-5
        "rms_norm_eps": float(f"{float(field(r, 'llama.attention.layer_norm_rms_epsilon')):.6g}"),
        "max_position_embeddings": int(field(r, "llama.context_length")),
        "tie_word_embeddings": True,
        "layer_types": types,
        "sliding_window": 512,
        "rope_theta": theta,
        "partial_rotary_factor": 1.0,
        "sliding_rope_theta": theta,
        "sliding_partial_rotary_factor": 1.0,
        "bos_token_id": int(field(r, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(field(r, "tokenizer.ggml.eos_token_id")),
        "torch_dtype": "bfloat16",
        "transformers_version": "4.57.1",
    }


def tokenizer(r):
    """tokenizer.json for the GGUF's gpt2 BPE with the smollm pre-tokenizer
    (llama.cpp: digits singly, then the GPT-2 regex), as HF tokenizers
    writes SmolLM2's own tokenizer.json."""
    if field(r, "tokenizer.ggml.model") != "gpt2" or field(r, "tokenizer.ggml.pre") != "smollm":
        sys.exit("real_model.py: tokenizer is not gpt2 BPE with the smollm pre-tokenizer")
    toks = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = field(r, "tokenizer.ggml.merges")
    added = []
    for i, (t, ty) in enumerate(zip(toks, types)):
        if ty in (gguf.TokenType.CONTROL, gguf.TokenType.USER_DEFINED):
            added.append({"id": i, "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False,
                          "special": ty == gguf.TokenType.CONTROL})
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tj = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, bl]},
        "post_processor": dict(bl, trim_offsets=False),
        "decoder": bl,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(toks)},
                  "merges": list(merges)},
    }
    if len(tj["model"]["vocab"]) != len(toks):
        sys.exit("real_model.py: duplicate tokens in the GGUF vocabulary")
    bos, eos = int(field(r, "tokenizer.ggml.bos_token_id")), int(field(r, "tokenizer.ggml.eos_token_id"))
    tc = {
        "add_bos_token": bool(field(r, "tokenizer.ggml.add_bos_token")),
        "add_eos_token": False,
        "bos_token": toks[bos],
        "eos_token": toks[eos],
        "unk_token": toks[int(field(r, "tokenizer.ggml.unknown_token_id"))],
        "pad_token": toks[int(field(r, "tokenizer.ggml.padding_token_id"))],
        "model_max_length": int(field(r, "llama.context_length")),
        "tokenizer_class": "GPT2Tokenizer",
        "clean_up_tokenization_spaces": False,
        "chat_template": field(r, "tokenizer.chat_template"),
    }
    return tj, tc


def main():
    global DITHER
    args = sys.argv[1:]
    if len(args) >= 2 and args[0] == "--dither":
        DITHER, args = float(args[1]), args[2:]
        if not 0 < DITHER <= 1:
            sys.exit("real_model.py: --dither must be in (0, 1]")
    qk_order = "rotate_half"
    if len(args) == 4 and args[0] == "--qk-order" and args[1] in ("rotate_half", "gguf", "inverse"):
        qk_order, args = args[1], args[2:]
    if len(args) != 2:
        sys.exit("usage: real_model.py [--dither FRAC] [--qk-order rotate_half|gguf|inverse] GGUF OUT_DIR")
    src, out = args
    r = gguf.GGUFReader(src)
    if field(r, "general.architecture") != "llama":
        sys.exit(f"real_model.py: {src}: general.architecture is not llama")
    os.mkdir(out)
    cfg = config(r)
    tj, tc = tokenizer(r)
    dump = lambda o: (json.dumps(o, indent=2, ensure_ascii=False) + "\n").encode()
    write_atomic(os.path.join(out, "config.json"), dump(cfg))
    write_atomic(os.path.join(out, "tokenizer.json"), json.dumps(tj, ensure_ascii=False).encode())
    write_atomic(os.path.join(out, "tokenizer_config.json"), dump(tc))
    write_atomic(os.path.join(out, "generation_config.json"), dump(
        {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"], "do_sample": False}))
    write_safetensors(os.path.join(out, "model.safetensors"), spark_tensors(r, cfg, qk_order))


if __name__ == "__main__":
    main()
