"""W4A16 (`cpu_int4`) loaded by PyTorch's own CPU int4 kernel.

The loader is the snippet of docs/formats.md, cut out of it and run exactly
as printed. Every quantized linear then runs `_weight_int4pack_mm_for_cpu` and is
compared with x @ W^T for our dequantization w = (q - 8) * scale + zero, for
the portable layout and for the layout pre-packed for this CPU
(`get_cpu_capability()`). A whole model built on the loader runs against
`sparkconv forward` on the same checkpoint.
"""

import json
import re

import numpy as np
import pytest

from conftest import MODEL_IDS, MODELS, REPO, config, load_safetensors, need, report, snr_db, top1_agreement

GROUP = 128


def readme_loader():
    """The cpu_int4 loader of docs/formats.md, executed as printed."""
    text = (REPO / "docs/formats.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    loaders = [b for b in blocks if "def load_cpu_int4" in b]
    assert len(loaders) == 1, "docs/formats.md must hold exactly one ```python block defining load_cpu_int4"
    ns = {}
    exec(compile(loaders[0], "docs/formats.md (cpu_int4 loader)", "exec"), ns)
    return ns


def prepack_flag():
    torch = need("torch")
    cap = torch.backends.cpu.get_cpu_capability()
    return {"AVX512": "avx512", "AVX2": "avx2"}.get(cap)


def w4a16(work, preset, untied, pack):
    return work.convert("w4a16", preset, untied, "--group", str(GROUP), "--quant-head", "--pack", pack)


def dequant(codes, sz):
    """Our dequantization from the portable codes [N, K] and scales_and_zeros [G, N, 2]."""
    import torch

    n, k = codes.shape
    g = k // sz.shape[0]
    scale = sz[..., 0].float().T.repeat_interleave(g, dim=1)  # [N, K]
    zero = sz[..., 1].float().T.repeat_interleave(g, dim=1)
    return (codes.float() - 8) * scale + zero


def portable_codes(qweight):
    import torch

    return torch.stack((qweight & 0xF, qweight >> 4), dim=-1).reshape(qweight.shape[0], -1)


@pytest.mark.parametrize("preset,untied", MODELS, ids=MODEL_IDS)
def test_torch_int4_kernel_every_linear(work, preset, untied):
    torch = need("torch")
    ns = readme_loader()
    portable = w4a16(work, preset, untied, "portable")
    sd = load_safetensors(portable)
    qc = config(portable)["quantization_config"]
    assert qc["quant_method"] == "cpu_int4" and qc["pack"] == "portable" and qc["group_size"] == GROUP
    names = sorted(k[: -len(".qweight")] for k in sd if k.endswith(".qweight"))
    assert "lm_head" in names and not any(n.endswith("g_proj") for n in names)

    flag = prepack_flag()
    pre = load_safetensors(w4a16(work, preset, untied, flag)) if flag else None
    torch.manual_seed(0)
    worst_bf16, worst_f32 = float("inf"), float("inf")
    for name in names:
        qweight, sz = sd[f"{name}.qweight"], sd[f"{name}.scales_and_zeros"]
        codes = portable_codes(qweight)
        w = dequant(codes, sz)  # [N, K] float32
        n, k = w.shape
        x = torch.randn(5, k, dtype=torch.bfloat16)
        mod = ns["CpuInt4Linear"](qweight, sz, GROUP, "portable")
        y = mod(x)
        assert y.shape == (5, n) and y.dtype == torch.bfloat16
        ref = x.float() @ w.T
        worst_bf16 = min(worst_bf16, snr_db(ref, y.float()))
        # The same packed weight with float32 activations and scales: only
        # accumulation order separates the kernel from x @ W^T.
        y32 = torch.ops.aten._weight_int4pack_mm_for_cpu(x.float(), mod.qweight, GROUP, sz.float())
        worst_f32 = min(worst_f32, snr_db(ref, y32))
        if pre is not None:
            # torch's own packer gives exactly the bytes we pre-packed.
            assert torch.equal(mod.qweight, pre[f"{name}.qweight"]), f"{name}: --pack {flag} bytes differ from torch's packing"
            ypre = ns["CpuInt4Linear"](pre[f"{name}.qweight"], pre[f"{name}.scales_and_zeros"], GROUP, flag)(x)
            assert torch.equal(ypre, y)
    # bf16 output rounding alone bounds the first figure near 55 dB.
    assert worst_bf16 >= 45, f"bf16 kernel output SNR {worst_bf16:.1f} dB"
    assert worst_f32 >= 100, f"float32 kernel output SNR {worst_f32:.1f} dB"
    report(
        "cpu_int4-kernel",
        model=f"{preset}-{'untied' if untied else 'tied'}",
        library=f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()})",
        linears=len(names),
        snr_db_min_f32=round(worst_f32, 1),
        snr_db_min_bf16=round(worst_bf16, 1),
        prepacked=flag or "none for this CPU",
    )


@pytest.mark.parametrize("preset,untied", MODELS, ids=MODEL_IDS)
def test_torch_model_on_readme_loader_matches_forward(work, sparkconv, preset, untied):
    torch = need("torch")
    safetensors_numpy = need("safetensors.numpy")
    import spark_torch

    ns = readme_loader()
    folder = w4a16(work, preset, untied, "portable")
    cfg = config(folder)
    # float32 around the int4 linears, which cast their input to bf16 as the
    # kernel needs: the same arithmetic `sparkconv forward` does for W4A16.
    model = ns["load_cpu_int4"](spark_torch.SparkForCausalLM(cfg, dtype=torch.float32), str(folder))
    assert sum(type(m).__name__ == "CpuInt4Linear" for m in model.modules()) == 5 * cfg["num_hidden_layers"] + 1
    ids = [int(i) for i in np.random.default_rng(11).integers(0, cfg["vocab_size"], 48)]
    logits = model(torch.tensor(ids)).numpy()
    dump = folder.parent / f"{folder.name}.dump.safetensors"
    sparkconv.run("forward", "--model", folder, "--ids", ",".join(map(str, ids)), "--dump", dump, "--force")
    ref = safetensors_numpy.load_file(str(dump))["logits"]
    s = snr_db(ref, logits)
    # The kernel rounds every linear's output to bf16, the Go forward keeps
    # float32: only near-ties may flip.
    top1, flips = top1_agreement(ref, logits)
    assert top1 >= 0.9 * len(ids), f"top-1 differs at {len(ids) - top1} of {len(ids)} positions (logits SNR {s:.1f} dB)"
    assert s >= 30, f"logits SNR {s:.1f} dB"
    report("cpu_int4-model", model=f"{preset}-{'untied' if untied else 'tied'}", positions=len(ids), top1=f"{top1}/{len(ids)}", logits_snr_db=round(s, 1),
           near_ties=flips)


def test_torch_reference_model_matches_forward(work, sparkconv):
    """The torch model itself (float32, original bf16 weights) equals the Go reference forward."""
    torch = need("torch")
    safetensors_numpy = need("safetensors.numpy")
    import spark_torch

    for untied in (False, True):
        folder = work.model("tiny", untied)
        cfg = config(folder)
        model = spark_torch.SparkForCausalLM(cfg, dtype=torch.float32)
        missing, unexpected = model.load_state_dict({k: v.float() for k, v in load_safetensors(folder).items()}, strict=False)
        assert not unexpected and set(missing) <= {"lm_head.weight"}
        ids = list(range(3, 3 + 40))
        logits = model(torch.tensor(ids)).numpy()
        dump = folder.parent / f"{folder.name}.ref.dump.safetensors"
        sparkconv.run("forward", "--model", folder, "--ids", ",".join(map(str, ids)), "--dump", dump, "--force")
        ref = safetensors_numpy.load_file(str(dump))["logits"]
        s = snr_db(ref, logits)
        assert s >= 100, f"torch vs Go reference forward: {s:.1f} dB"
        assert (logits.argmax(-1) == ref.argmax(-1)).all()
        report("torch-reference", model=f"tiny-{'untied' if untied else 'tied'}", logits_snr_db=round(s, 1))
