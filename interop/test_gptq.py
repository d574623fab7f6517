"""GPTQ (W4A8 checkpoint in GPTQ v1 format) loaded by GPTQModel.

GPTQModel's pure-torch kernel (`TorchLinear`, the one that runs on any CPU)
takes qweight/qzeros/scales/g_idx of every quantized linear and the quantized
head, converts v1 zeros to its v2 form with the library's own function, and
its dequantized weight must equal our symmetric grid w = (q - 8) * scale bit
for bit, scales of either sign (a negative scale puts the grid's eighth
step on the positive side); its forward must equal x @ W^T. GPTQModel's and transformers'
config classes must accept our quantization_config.
"""

import pytest

from conftest import MODEL_IDS, MODELS, config, load_safetensors, need, report, snr_db

GROUP = 128


def codes(qweight):
    """Our layout: nibble j of word [r, n] is the code of k = 8r + j (low first)."""
    import torch

    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    q = (qweight[:, None, :] >> shifts[None, :, None]) & 0xF  # [K/8, 8, N]
    return q.reshape(-1, qweight.shape[1])  # [K, N]


@pytest.mark.parametrize("preset,untied", MODELS, ids=MODEL_IDS)
def test_gptqmodel_torch_kernel_loads_gptq(work, preset, untied):
    torch = need("torch")
    gptqmodel = need("gptqmodel")
    transformers = need("transformers")
    from gptqmodel.nn_modules.qlinear.torch import TorchLinear
    from gptqmodel.quantization.config import QuantizeConfig
    from gptqmodel.utils.model import convert_gptq_v1_to_v2_format_module

    folder = work.convert("gptq", preset, untied, "--group", str(GROUP), "--quant-head")
    qc = config(folder)["quantization_config"]

    hf = transformers.GPTQConfig.from_dict(dict(qc))
    assert (hf.bits, hf.group_size, hf.sym, hf.desc_act) == (4, GROUP, True, False)
    gq = QuantizeConfig.from_quant_config(dict(qc))
    assert (gq.bits, gq.group_size, gq.sym, gq.desc_act, gq.lm_head) == (4, GROUP, True, False, True)
    assert gq.pack_dtype == torch.int32 and str(gq.format.value) == "gptq"

    sd = load_safetensors(folder)
    names = sorted(k[: -len(".qweight")] for k in sd if k.endswith(".qweight"))
    assert "lm_head" in names and not any(n.endswith("g_proj") for n in names)
    # GPTQModel's dynamic rule excludes every g_proj.
    for n in names + [k[: -len(".weight")] for k in sd if k.endswith("g_proj.weight")]:
        assert (gq.dynamic_get(n) is False) == n.endswith("g_proj"), n

    torch.manual_seed(0)
    worst = float("inf")
    negative = sum(int((sd[f"{n}.scales"] < 0).sum()) for n in names)
    total = sum(sd[f"{n}.scales"].numel() for n in names)
    assert 0 < negative < total, f"{negative} of {total} scales negative: the kernel must see both signs"
    for name in names:
        qweight = sd[f"{name}.qweight"]
        k, n = qweight.shape[0] * 8, qweight.shape[1]
        mod = TorchLinear(bits=4, group_size=GROUP, sym=True, desc_act=False, in_features=k, out_features=n, pack_dtype=torch.int32, bias=False)
        for buf in ("qweight", "qzeros", "scales", "g_idx"):
            assert getattr(mod, buf).shape == sd[f"{name}.{buf}"].shape, f"{name}.{buf}"
            assert getattr(mod, buf).dtype == sd[f"{name}.{buf}"].dtype, f"{name}.{buf}"
            getattr(mod, buf).copy_(sd[f"{name}.{buf}"])
        convert_gptq_v1_to_v2_format_module(mod, bits=4, pack_dtype=torch.int32)
        mod.optimized = True  # skip torch.compile of the dequantizer: eager kernel, same arithmetic
        mod.post_init()
        mod.eval()
        w = mod.dequantize_weight()  # [K, N] in the scales' dtype
        scale = sd[f"{name}.scales"].float().repeat_interleave(GROUP, dim=0)  # [K, N]
        ours = ((codes(qweight).float() - 8) * scale).to(w.dtype)
        diff = int((w.view(torch.int16) != ours.view(torch.int16)).sum())
        assert diff == 0, f"{name}: {diff} of {w.numel()} dequantized weights differ from (q - 8) * scale"
        x = torch.randn(4, k, dtype=torch.float16)
        y = mod(x)
        worst = min(worst, snr_db(x.float() @ ours.float(), y.float()))
    assert worst >= 45, f"TorchLinear forward vs x @ W^T: {worst:.1f} dB"  # fp16 output rounding: ~60 dB
    report(
        "gptq",
        model=f"{preset}-{'untied' if untied else 'tied'}",
        library=f"GPTQModel {gptqmodel.__version__} TorchLinear, transformers {transformers.__version__} GPTQConfig",
        linears=len(names),
        dequant_bit_mismatches=0,
        negative_scales=f"{negative} of {total}",
        forward_snr_db_min=round(worst, 1),
    )


KEPT = ("model.layers.1.mlp.down_proj", "model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj")


@pytest.mark.parametrize("flags", [("--keep-float-modules", ",".join(KEPT)), ("--keep-float", "2", "--keep-float-tokens", "256")], ids=["named", "measured"])
def test_gptqmodel_dynamic_keeps_float(work, flags):
    """--keep-float: GPTQModel's and transformers' configs accept the dynamic
    rules; GPTQModel's own dynamic_get excludes exactly the kept linears (and
    the fused gate_up_proj of a kept pair, vLLM's module name), whose weights
    are the input's bit for bit; every other linear is quantized."""
    torch = need("torch")
    need("gptqmodel")
    transformers = need("transformers")
    from gptqmodel.quantization.config import QuantizeConfig

    folder = work.convert("gptq", "tiny", False, "--group", str(GROUP), *flags)
    cfg = config(folder)
    qc = cfg["quantization_config"]
    kept = cfg["sparkconv_keep_float"]["modules"]
    assert qc["meta"]["keep_float"] == kept
    if flags[0] == "--keep-float-modules":
        assert kept == list(KEPT)
    transformers.GPTQConfig.from_dict(dict(qc))
    gq = QuantizeConfig.from_quant_config(dict(qc))
    sd = load_safetensors(folder)
    orig = load_safetensors(work.model("tiny", False))
    linears = ("self_attn.q_k_v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
    for i in range(cfg["num_hidden_layers"]):
        for l in linears:
            n = f"model.layers.{i}.{l}"
            if n in kept:
                assert gq.dynamic_get(n) is False, n
                assert f"{n}.qweight" not in sd and torch.equal(sd[f"{n}.weight"], orig[f"{n}.weight"]), n
            else:
                assert gq.dynamic_get(n) is not False, n
                assert f"{n}.qweight" in sd and f"{n}.weight" not in sd, n
        fused = f"model.layers.{i}.mlp.gate_up_proj"
        assert (gq.dynamic_get(fused) is False) == (f"model.layers.{i}.mlp.gate_proj" in kept), fused
        assert gq.dynamic_get(f"model.layers.{i}.self_attn.g_proj") is False
    report("gptq keep-float", flags=" ".join(flags), kept=len(kept))
