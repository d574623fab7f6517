"""Write an equal-shape bf16 GGUF of a Spark-X2.5 checkpoint for llama-quantize.

The anchor for sparkconv's conversion speed (scripts/llama-quantize-anchor.sh):
llama.cpp has no Spark architecture, so the tensors are written under the
`llama` architecture's names with Spark's dimensions and the checkpoint's bf16
bytes unchanged: q_k_v_proj as the fused blk.N.attn_qkv [3072, 2048],
g_proj as blk.N.attn_gate, o_proj / gate / up / down as attn_output /
ffn_gate / ffn_up / ffn_down, the norms as attn_norm / ffn_norm /
output_norm, and no output.weight (the head is tied to token_embd, as in
Spark, so llama-quantize treats the embedding as the head). llama-quantize
reads only the hyperparameters and the tensors; the GGUF is not meant to run.

usage: python spark_to_gguf.py MODEL_DIR OUT.gguf   (needs `gguf` and numpy)
"""

import json
import struct
import sys

import numpy as np
import gguf

NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_k_v_proj.weight": "attn_qkv.weight",
    "self_attn.g_proj.weight": "attn_gate.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(name):
    if name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if name == "model.norm.weight":
        return "output_norm.weight"
    if name.startswith("model.layers."):
        layer, rest = name[len("model.layers."):].split(".", 1)
        if rest in NAMES:
            return f"blk.{int(layer)}.{NAMES[rest]}"
    raise SystemExit(f"{name}: no llama name for this tensor")


def main(model, out):
    cfg = json.load(open(f"{model}/config.json"))
    path = f"{model}/model.safetensors"
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    data = np.memmap(path, dtype=np.uint8, mode="r")
    w = gguf.GGUFWriter(out, "llama")
    w.add_name("spark-x2.5-equal-shape")
    w.add_context_length(4096)
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    for name in sorted(header, key=lambda k: header[k]["data_offsets"][0]):
        t = header[name]
        if t["dtype"] != "BF16":
            raise SystemExit(f"{name}: dtype {t['dtype']}, want BF16")
        lo, hi = t["data_offsets"]
        arr = data[8 + n + lo: 8 + n + hi].view(np.uint16).reshape(t["shape"])
        w.add_tensor(gguf_name(name), arr, raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
