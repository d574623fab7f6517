"""w4a8-zp (compressed-tensors pack-quantized, asymmetric int4) loaded by
compressed-tensors itself.

The library validates our quantization_config, attaches its schemes to a
module tree named like the checkpoint (its own target/ignore matching decides
what is quantized), and its pack-quantized compressor unpacks our
weight_packed and weight_zero_point and dequantizes. The result must equal
(q - z) * scale bit for bit and reproduce the SNR our report claims for every
tensor; the zero points must be the library's own asymmetric ones (not a
symmetric grid in disguise).
"""

import json

import pytest

from conftest import MODEL_IDS, MODELS, config, load_safetensors, need, report, snr_db
from test_w8a8 import module_tree


@pytest.mark.parametrize("preset,untied", MODELS, ids=MODEL_IDS)
def test_compressed_tensors_loads_w4a8_zp(work, preset, untied):
    torch = need("torch")
    ct = need("compressed_tensors")
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig, QuantizationStatus, apply_quantization_config

    transformers = need("transformers")

    out = work.convert("w4a8-zp", preset, untied, "--group", "32", "--quant-head")
    orig = load_safetensors(work.model(preset, untied))
    sd = load_safetensors(out)
    cfg = config(out)
    qc_dict = cfg["quantization_config"]

    qc = QuantizationConfig.model_validate(qc_dict)
    assert qc.format == "pack-quantized"
    assert qc.quantization_status == QuantizationStatus.COMPRESSED
    args = qc.config_groups["group_0"].weights
    assert (args.num_bits, args.symmetric, args.strategy, args.group_size) == (4, False, "group", 32)
    hf = transformers.CompressedTensorsConfig.from_dict(qc_dict)
    assert hf.quantization_config.format == "pack-quantized"

    # module_tree reads each linear's shape from its .weight: give it the original's.
    shapes = {k: v for k, v in orig.items() if k.endswith(".weight")}
    model = module_tree({**shapes, **sd}, cfg["num_hidden_layers"])
    apply_quantization_config(model, qc)
    quantized = {n for n, m in model.named_modules() if getattr(m, "quantization_scheme", None) is not None}
    layers = [f"model.layers.{i}" for i in range(cfg["num_hidden_layers"])]
    expect = {f"{l}.{m}" for l in layers for m in ("self_attn.q_k_v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")}
    assert quantized == expect | {"lm_head"}, "the config must quantize the 5 linears of every layer and lm_head (by name), no g_proj"
    assert cfg["tie_word_embeddings"] is False and torch.equal(sd["model.embed_tokens.weight"], orig["model.embed_tokens.weight"])
    for l in layers:
        g = f"{l}.self_attn.g_proj.weight"
        assert torch.equal(sd[g], orig[g]), f"{g} must be copied bit for bit"

    rep = {t["name"]: t for t in json.loads((out / "sparkconv-report.json").read_text())["tensors"]}
    compressor = BaseCompressor.get_value_from_registry(qc.format)
    snrs, zeros_seen = [], set()
    for name, module in model.named_modules():
        if name not in quantized:
            continue
        source = f"{name}.weight" if name != "lm_head" or untied else "model.embed_tokens.weight"  # the tied head's own weights
        local = {k: sd[f"{name}.{k}"] for k in ("weight_packed", "weight_scale", "weight_zero_point", "weight_shape")}
        assert f"{name}.weight" not in sd
        w = compressor.decompress(local, module.quantization_scheme)["weight"]
        assert w.shape == orig[source].shape and w.dtype == local["weight_scale"].dtype
        # Our reading of the bytes, independent of the library's unpacker.
        n, k = w.shape
        packed = local["weight_packed"].to(torch.int64) & 0xFFFFFFFF
        q = torch.stack([(packed >> (4 * j)) & 15 for j in range(8)], dim=-1).reshape(n, k)
        zp = local["weight_zero_point"].to(torch.int64) & 0xFFFFFFFF
        z = torch.stack([(zp >> (4 * j)) & 15 for j in range(8)], dim=1).reshape(n, -1)
        zeros_seen.update(int(v) for v in z.unique())
        s = local["weight_scale"].to(torch.float32)
        exact = (q - z.repeat_interleave(32, dim=1)).to(torch.float32) * s.repeat_interleave(32, dim=1)
        ours = exact.to(w.dtype)
        mismatched = int((w.view(torch.int16) != ours.view(torch.int16)).sum())
        assert mismatched == 0, f"{name}: {mismatched} weights differ from (q - z) * scale"
        claimed = rep[source]["snr_db"]
        s32 = snr_db(orig[source].float(), exact)
        assert abs(s32 - claimed) < 1e-6, f"{name}: (q - z) * scale gives {s32:.6f} dB, report says {claimed:.6f}"
        snrs.append(snr_db(orig[source].float(), w.float()))
    assert len(zeros_seen) >= 8, f"zero points take only {sorted(zeros_seen)}"
    report(
        "w4a8-zp",
        model=f"{preset}-{'untied' if untied else 'tied'}",
        library=f"compressed-tensors {ct.__version__}",
        tensors=len(snrs),
        zero_points_used=len(zeros_seen),
        snr_db_min=round(min(snrs), 2),
        snr_db_max=round(max(snrs), 2),
    )
