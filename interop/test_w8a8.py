"""W8A8 (compressed-tensors int-quantized) loaded by compressed-tensors itself.

The library parses our quantization_config, attaches its schemes to a module
tree named like the checkpoint (so its own target/ignore matching decides
what is quantized), and its int-quantized compressor decompresses our state
dict. The result must equal q * scale bit for bit and reproduce the SNR our
report claims for every tensor.
"""

import json

import pytest

from conftest import MODEL_IDS, MODELS, config, load_safetensors, need, report, snr_db

LINEARS = ("self_attn.q_k_v_proj", "self_attn.o_proj", "self_attn.g_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def module_tree(sd: dict, n_layers: int):
    """nn.Linear modules named exactly as the checkpoint's linears (and the head)."""
    torch = need("torch")
    root = torch.nn.Module()
    root.model = torch.nn.Module()
    root.model.layers = torch.nn.ModuleList()
    for i in range(n_layers):
        layer = torch.nn.Module()
        layer.self_attn, layer.mlp = torch.nn.Module(), torch.nn.Module()
        for name in LINEARS:
            parent, attr = name.split(".")
            n, k = sd[f"model.layers.{i}.{name}.weight"].shape
            setattr(getattr(layer, parent), attr, torch.nn.Linear(k, n, bias=False, dtype=torch.bfloat16, device="meta"))
        root.model.layers.append(layer)
    v, h = sd["model.embed_tokens.weight"].shape
    root.lm_head = torch.nn.Linear(h, v, bias=False, dtype=torch.bfloat16, device="meta")
    return root


@pytest.mark.parametrize("preset,untied", MODELS, ids=MODEL_IDS)
def test_compressed_tensors_loads_w8a8(work, preset, untied):
    torch = need("torch")
    ct = need("compressed_tensors")
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig, QuantizationStatus, apply_quantization_config

    transformers = need("transformers")

    out = work.convert("w8a8", preset, untied)
    orig = load_safetensors(work.model(preset, untied))
    sd = load_safetensors(out)
    cfg = config(out)
    qc_dict = cfg["quantization_config"]

    # The library's own parsers accept the config.
    qc = QuantizationConfig.model_validate(qc_dict)
    assert qc.format == "int-quantized"
    assert qc.quantization_status == QuantizationStatus.COMPRESSED
    hf = transformers.CompressedTensorsConfig.from_dict(qc_dict)
    assert hf.quantization_config.format == "int-quantized"

    # Its matcher decides which modules are quantized.
    model = module_tree(sd, cfg["num_hidden_layers"])
    apply_quantization_config(model, qc)
    quantized = {n for n, m in model.named_modules() if getattr(m, "quantization_scheme", None) is not None}
    expect = {f"model.layers.{i}.{l}" for i in range(cfg["num_hidden_layers"]) for l in LINEARS if not l.endswith("g_proj")}
    assert quantized == expect, "ignore list must keep every g_proj and lm_head float, quantize the rest"
    assert all(sd[f"{n}.weight"].dtype == torch.int8 for n in quantized)
    for n in ("lm_head", *(f"model.layers.{i}.self_attn.g_proj" for i in range(cfg["num_hidden_layers"]))):
        assert n not in quantized
    for i in range(cfg["num_hidden_layers"]):
        g = f"model.layers.{i}.self_attn.g_proj.weight"
        assert torch.equal(sd[g], orig[g]), f"{g} must be copied bit for bit"

    rep = {t["name"]: t for t in json.loads((out / "sparkconv-report.json").read_text())["tensors"]}
    compressor = BaseCompressor.get_value_from_registry(qc.format)
    worst_bits, snrs = 0, []
    for name, module in model.named_modules():
        if name not in quantized:
            continue
        local = {"weight": sd[f"{name}.weight"], "weight_scale": sd[f"{name}.weight_scale"]}
        w = compressor.decompress(local, module.quantization_scheme)["weight"]
        assert w.dtype == sd[f"{name}.weight_scale"].dtype and w.shape == orig[f"{name}.weight"].shape
        # Our dequantization: q * scale exactly (in float32, exact for int8 x bf16),
        # then rounded to the scale's dtype, which is what a bf16 product is.
        ours = (local["weight"].to(torch.float32) * local["weight_scale"].to(torch.float32)).to(w.dtype)
        mismatched = int((w.view(torch.int16) != ours.view(torch.int16)).sum())
        worst_bits = max(worst_bits, mismatched)
        assert mismatched == 0, f"{name}: {mismatched} weights differ from q * scale"
        # The report's SNR is of q * scale in float32 (what an int8 GEMM with a
        # float epilogue computes); the library's bf16 weights round once more.
        exact = local["weight"].to(torch.float32) * local["weight_scale"].to(torch.float32)
        claimed = rep[f"{name}.weight"]["snr_db"]
        s32 = snr_db(orig[f"{name}.weight"].float(), exact)
        assert abs(s32 - claimed) < 1e-6, f"{name}: q * scale gives {s32:.6f} dB, report says {claimed:.6f}"
        s = snr_db(orig[f"{name}.weight"].float(), w.float())
        assert s > claimed - 1.0, f"{name}: compressed-tensors' bf16 weights {s:.2f} dB vs {claimed:.2f}"
        snrs.append(s)
    report(
        "w8a8",
        model=f"{preset}-{'untied' if untied else 'tied'}",
        library=f"compressed-tensors {ct.__version__}",
        tensors=len(snrs),
        bit_mismatches=worst_bits,
        snr_db_min=round(min(snrs), 2),
        snr_db_max=round(max(snrs), 2),
    )


KEPT = ("model.layers.1.mlp.down_proj", "model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj")


@pytest.mark.parametrize("flags", [("--keep-float-modules", ",".join(KEPT)), ("--keep-float", "2", "--keep-float-tokens", "256")], ids=["named", "measured"])
def test_compressed_tensors_keeps_float(work, flags):
    """--keep-float: compressed-tensors' own matcher leaves the kept linears
    unquantized (also under vLLM's fused gate_up_proj name), their weights are
    the input's bit for bit, and everything else is quantized as usual."""
    torch = need("torch")
    need("compressed_tensors")
    from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config
    from compressed_tensors.utils.match import match_name

    out = work.convert("w8a8", "tiny", False, *flags)
    orig = load_safetensors(work.model("tiny", False))
    sd = load_safetensors(out)
    cfg = config(out)
    kept = cfg["sparkconv_keep_float"]["modules"]
    if flags[0] == "--keep-float-modules":
        assert kept == list(KEPT)
    else:
        assert len(kept) >= 2 and len(cfg["sparkconv_keep_float"]["measured"]) == 2
    qc = QuantizationConfig.model_validate(cfg["quantization_config"])
    assert all(m in qc.ignore for m in kept)
    model = module_tree(sd, cfg["num_hidden_layers"])
    apply_quantization_config(model, qc)
    quantized = {n for n, m in model.named_modules() if getattr(m, "quantization_scheme", None) is not None}
    expect = {f"model.layers.{i}.{l}" for i in range(cfg["num_hidden_layers"]) for l in LINEARS if not l.endswith("g_proj")} - set(kept)
    assert quantized == expect
    for m in kept:
        w = f"{m}.weight"
        assert sd[w].dtype == orig[w].dtype and torch.equal(sd[w], orig[w]), f"{w} must be copied bit for bit"
        assert f"{m}.weight_scale" not in sd
    fused = {"gate_up_proj": ["gate_proj", "up_proj"]}
    for i in range(cfg["num_hidden_layers"]):
        name = f"model.layers.{i}.mlp.gate_up_proj"
        want = f"model.layers.{i}.mlp.gate_proj" in kept
        assert any(match_name(name, ign, fused) for ign in qc.ignore) == want, name
    report("w8a8 keep-float", flags=" ".join(flags), kept=len(kept), quantized=len(quantized))
