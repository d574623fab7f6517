"""The rotated checkpoint (sparkconv rotate) is the same network, and the
consumers take it and its builds unchanged.

torch computes the original and the rotated checkpoint in float32 with the
suite's own Spark model (spark_torch.py); compressed-tensors loads the W8A8
build of the rotated checkpoint; ONNX Runtime runs its export.
"""

import json

import pytest

from conftest import config, load_safetensors, need, report, snr_db
from test_w8a8 import module_tree


def rotated(work, untied: bool, dtype: str):
    model = work.model("tiny", untied)
    out = work.root / f"{model.name}.rot-{dtype}"
    if not out.exists():
        work.sc.run("rotate", "--model", model, "--out", out, "--dtype", dtype, "--seed", "11")
    return model, out


def torch_logits(folder, ids):
    torch = need("torch")
    import spark_torch

    cfg = config(folder)
    model = spark_torch.SparkForCausalLM(cfg, dtype=torch.float32)
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in load_safetensors(folder).items()}, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    return model(torch.tensor(ids)).numpy()


@pytest.mark.parametrize("untied", [False, True], ids=["tied", "untied"])
def test_torch_rotated_is_the_original(work, untied):
    """float32 rotation: the same logits to float32 rounding in torch
    (measured 123.4-123.8 dB on tiny; 100 dB leaves the margin); the config
    unties the head and records the rotation."""
    model, rot = rotated(work, untied, "f32")
    ids = list(range(3, 3 + 40))
    ref, got = torch_logits(model, ids), torch_logits(rot, ids)
    s = snr_db(ref, got)
    assert s >= 100, f"rotated vs original logits in torch: {s:.1f} dB"
    assert (ref.argmax(-1) == got.argmax(-1)).all()
    cfg = config(rot)
    assert cfg["tie_word_embeddings"] is False
    assert cfg["sparkconv_rotation"]["kind"] == "randomized-hadamard" and cfg["sparkconv_rotation"]["seed"] == 11
    sd = load_safetensors(rot)
    norms = [k for k in sd if k.endswith("layernorm.weight") or k == "model.norm.weight"]
    assert norms and all(bool((sd[k] == 1).all()) for k in norms), "every norm is folded to 1"
    report("rotation-torch", model=f"tiny-{'untied' if untied else 'tied'}", logits_snr_db=round(s, 1))


def test_compressed_tensors_loads_rotated_w8a8(work):
    """W8A8 of the rotated checkpoint: compressed-tensors' own matcher and
    decompressor take it as any W8A8 build, and the rotation record stays in
    its config."""
    torch = need("torch")
    need("compressed_tensors")
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config

    _, rot = rotated(work, False, "same")
    out = work.root / "tiny-tied.rot-same.w8a8"
    if not out.exists():
        work.sc.run("w8a8", "--rtn", "--model", rot, "--out", out)
    sd, cfg = load_safetensors(out), config(out)
    assert cfg["sparkconv_rotation"]["seed"] == 11 and cfg["tie_word_embeddings"] is False
    assert "lm_head.weight" in sd, "the untied head is written"
    qc = QuantizationConfig.model_validate(cfg["quantization_config"])
    tree = module_tree(sd, cfg["num_hidden_layers"])
    apply_quantization_config(tree, qc)
    compressor = BaseCompressor.get_value_from_registry(qc.format)
    rsd = load_safetensors(rot)
    claimed = {t["name"]: t["snr_db"] for t in json.loads((out / "sparkconv-report.json").read_text())["tensors"]}
    worst, n = 1e9, 0
    for name, module in tree.named_modules():
        if getattr(module, "quantization_scheme", None) is None:
            continue
        w = compressor.decompress({"weight": sd[f"{name}.weight"], "weight_scale": sd[f"{name}.weight_scale"]}, module.quantization_scheme)["weight"]
        # The report's SNR (of q * scale in float32) is measured against the
        # rotated weights the build read; the library's weights are that
        # product rounded to bf16 (as test_w8a8 checks bit for bit).
        ref = rsd[f"{name}.weight"].float()
        exact = sd[f"{name}.weight"].to(torch.float32) * sd[f"{name}.weight_scale"].to(torch.float32)
        c = claimed[f"{name}.weight"]
        assert abs(snr_db(ref, exact) - c) < 1e-6, f"{name}: q * scale {snr_db(ref, exact):.6f} dB, report {c:.6f}"
        s = snr_db(ref, w.float())
        assert s > c - 1.0, f"{name}: compressed-tensors' weights {s:.2f} dB vs {c:.2f}"
        worst, n = min(worst, s), n + 1
    assert n == 5 * cfg["num_hidden_layers"]
    report("rotation-w8a8", model="tiny-tied", worst_weight_snr_db=round(worst, 1))


def test_onnx_export_of_rotated_verifies(work, sparkconv):
    """The rotated checkpoint exports and its graphs pass verify in ONNX Runtime."""
    _, rot = rotated(work, False, "same")
    ex = work.root / "tiny-tied.rot-same.onnx"
    if not ex.exists():
        sparkconv.run("export-onnx", "--model", rot, "--out", ex)
    v = sparkconv.json("verify", "--model", rot, "--export", ex, "--steps", "24")
    assert v["pass"] and v["top1_agree"] == 24
    report("rotation-onnx", model="tiny-tied", chain_logits_snr_db=v["chain_logits"]["snr_db"])
