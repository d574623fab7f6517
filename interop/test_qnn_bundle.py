"""The QNN bundle (`sparkconv qnn-bundle`) in Qualcomm's AIMET.

Each graph of the bundle is loaded into AIMET's QuantizationSimModel with
the bundle's own .encodings file, and AIMET's simulated outputs, on the
bundle's calibration inputs, must score within 1 dB (SNR against the float
graph) of the bundle's own QDQ simulation graph on the same inputs. AIMET
then computes encodings itself on the same inputs; how far its ranges are
from ours (in quantization steps of ours) is reported, not asserted (see
the note at that check).
"""

import json

import numpy as np
import pytest

from conftest import need, report, snr_db


@pytest.fixture(scope="module")
def bundle(work):
    """A w8a16 bundle of the tiny model (the default precision)."""
    model = work.model("tiny", False)
    export = work.convert("export-onnx", "tiny", False, "--context", "64", "--dtype", "fp32")
    out = export.parent / "tiny-tied.qnn-bundle"
    if not out.exists():
        work.sc.run("qnn-bundle", "--model", model, "--export", export, "--out", out)
    return out


def graphs(folder):
    return sorted(json.loads((folder / "bundle.json").read_text())["graphs"])


def feeds_of(folder, g):
    """The npz samples as graph feeds. The bundle writes int64 inputs
    (input_ids) as int32, as Qualcomm AI Hub's tooling expects; they are
    widened back to the graph's int64 here."""
    d = np.load(folder / "calib" / f"{g}.npz")
    n = d[d.files[0]].shape[0]
    widen = lambda a: a.astype(np.int64) if a.dtype == np.int32 else a
    return [{k: widen(d[k][i]) for k in d.files} for i in range(n)]


# The tiny model's graphs. Run by onnxruntime 1.32.0, two of the bundle's
# QDQ graphs score more than 1 dB below AIMET applying the same bundle's
# .encodings (head logits 40.64 vs 42.20, layer_02 hidden_out 38.28 vs
# 39.44); the same bundle run by onnxruntime 1.31.1 agrees within 0.09 dB on
# all 14 outputs. So ORT 1.32 executes these QDQ graphs differently (its QDQ
# optimizations). Not strict, so a
# fix can land without this suite going red; an XPASS says the marks can go.
def _disagrees(g, why):
    return pytest.param(g, marks=pytest.mark.xfail(strict=False, reason=why))


GRAPHS = ["embed", "layer_00", "layer_01", _disagrees("layer_02", "ORT 1.32: QDQ hidden_out 1.16 dB below AIMET (1.31.1: agree)"), "layer_03",
          _disagrees("head", "ORT 1.32: QDQ logits 1.56 dB below AIMET (1.31.1: agree)")]


@pytest.mark.parametrize("g", GRAPHS)
def test_aimet_quantsim_matches_bundle_simulation(bundle, g):
    need("aimet_onnx")
    ort = need("onnxruntime")
    onnx = need("onnx")
    import logging

    from aimet_onnx.quantsim import QuantizationSimModel, load_encodings_to_sim

    logging.disable(logging.WARNING)  # AIMET logs every quantizer it touches
    info = json.loads((bundle / "bundle.json").read_text())
    assert g in info["graphs"]
    bits = {"param_type": f"int{info['weight_bits']}", "activation_type": f"int{info['activation_bits']}"}
    rows = {}
    src = bundle / f"{g}.aimet" / f"{g}.onnx"
    feeds = feeds_of(bundle, g)
    fl = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    qdq = ort.InferenceSession(str(bundle / "qdq" / f"{g}.onnx"), providers=["CPUExecutionProvider"])
    sim = QuantizationSimModel(onnx.load(str(src)), quant_scheme="min_max", providers=["CPUExecutionProvider"], **bits)
    load_encodings_to_sim(sim, str(bundle / f"{g}.aimet" / f"{g}.encodings"), strict=False)
    names = [o.name for o in fl.get_outputs()]
    ref = [fl.run(None, f) for f in feeds]
    ours = [qdq.run(None, f) for f in feeds]
    aimet = [sim.session.run(None, f) for f in feeds]
    for j, name in enumerate(names):
        r = np.stack([x[j] for x in ref])
        s_ours, s_aimet = snr_db(r, np.stack([x[j] for x in ours])), snr_db(r, np.stack([x[j] for x in aimet]))
        rows[name] = (round(s_aimet, 2), round(s_ours, 2))
    report("qnn-bundle-aimet", graph=g, precision=info["precision"], snr_db_aimet_vs_ours=rows)
    for name, (s_aimet, s_ours) in rows.items():
        assert abs(s_aimet - s_ours) <= 1.0, f"{g}.{name}: AIMET QuantSim {s_aimet:.2f} dB, bundle's QDQ graph {s_ours:.2f} dB"


def test_aimet_computed_encodings_vs_bundle(bundle):
    """AIMET's own min/max encodings on the bundle's npz against ours, in our steps.

    Not asserted: the bundle's ranges come from more positions than its npz
    holds (--observe vs --positions), KV inputs are tied to their outputs,
    Concat inputs to their output and the mask is clipped to --mask-clip, so
    AIMET on the npz alone cannot reproduce them to one step. The figures go
    to the report (and docs/formats.md#interop) so a change in either shows.
    """
    need("aimet_onnx")
    onnx = need("onnx")
    import logging

    from aimet_onnx.quantsim import QuantizationSimModel

    logging.disable(logging.WARNING)
    info = json.loads((bundle / "bundle.json").read_text())
    bits = {"param_type": f"int{info['weight_bits']}", "activation_type": f"int{info['activation_bits']}"}
    within, total, far = 0, 0, []
    for g in graphs(bundle):
        src = bundle / f"{g}.aimet" / f"{g}.onnx"
        ours = {e["name"]: e for e in json.loads((bundle / f"{g}.aimet" / f"{g}.encodings").read_text())["activation_encodings"]}
        sim = QuantizationSimModel(onnx.load(str(src)), quant_scheme="min_max", providers=["CPUExecutionProvider"], **bits)
        sim.compute_encodings(feeds_of(bundle, g))
        for name, e in ours.items():
            q = sim.qc_quantize_op_dict.get(name)
            enc = q.get_encodings() if q is not None and q.enabled else None
            if not enc:
                continue
            step = e["scale"][0]
            lo = e["offset"][0] * step
            hi = (e["offset"][0] + 2 ** e["bw"] - 1) * step
            d = max(abs(enc[0].min - lo), abs(enc[0].max - hi)) / step
            total += 1
            if d <= 1:
                within += 1
            else:
                far.append((f"{g}.{name}", round(float(d), 1)))
    assert total > 0, "AIMET placed no quantizer on any tensor the bundle encodes"
    far.sort(key=lambda x: -x[1])
    report("qnn-bundle-aimet-encodings", compared=total, within_one_step=within, farthest=far[:5])


@pytest.fixture(scope="module")
def bundle_w4a16(work):
    """A w4a16 bundle of the tiny model (forced: its random layers simulate below the 20 dB bar at 4 bits)."""
    model = work.model("tiny", False)
    export = work.convert("export-onnx", "tiny", False, "--context", "64", "--dtype", "fp32")
    out = export.parent / "tiny-tied.qnn-bundle-w4a16"
    if not out.exists():
        work.sc.run("qnn-bundle", "--model", model, "--export", export, "--out", out, "--precision", "w4a16", "--force")
    return out


W4A16_GRAPHS = ["embed", "layer_00", "layer_01", "layer_02", "layer_03",
                _disagrees("head", "ORT 1.32: QDQ logits 1.6 dB below AIMET (the w8a16 head's disagreement: the head is 8-bit in both)")]


@pytest.mark.parametrize("g", W4A16_GRAPHS)
def test_aimet_quantsim_matches_bundle_simulation_w4a16(bundle_w4a16, g):
    """AIMET's QuantSim with the w4a16 bundle's .encodings: it applies the
    widths the file gives (4-bit layer weights, 8-bit head weights and KV
    cache, 16-bit embedding table) and simulates within 1 dB of the bundle's
    QDQ graph on the npz inputs."""
    need("aimet_onnx")
    ort = need("onnxruntime")
    onnx = need("onnx")
    import logging

    from aimet_onnx.quantsim import QuantizationSimModel, load_encodings_to_sim

    logging.disable(logging.WARNING)
    bundle = bundle_w4a16
    info = json.loads((bundle / "bundle.json").read_text())
    assert info["precision"] == "w4a16" and info["recipe"]["kv_cache_bits"] == 8 and info["recipe"]["head_weight_bits"] == 8
    src = bundle / f"{g}.aimet" / f"{g}.onnx"
    feeds = feeds_of(bundle, g)
    fl = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    qdq = ort.InferenceSession(str(bundle / "qdq" / f"{g}.onnx"), providers=["CPUExecutionProvider"])
    sim = QuantizationSimModel(onnx.load(str(src)), quant_scheme="min_max", providers=["CPUExecutionProvider"],
                               param_type="int4", activation_type="int16")
    load_encodings_to_sim(sim, str(bundle / f"{g}.aimet" / f"{g}.encodings"), strict=False)
    want = {"embed_tokens.weight": 16, "proj.weight_T": 4, "past_key": 8, "past_value": 8}
    if g == "head":
        want = {"embed_tokens.weight_T": 8}
    for name, q in sim.qc_quantize_op_dict.items():
        for sfx, bw in want.items():
            if q.enabled and name.endswith(sfx):
                assert q.bitwidth == bw, f"{g}: AIMET applied {q.bitwidth} bits to {name}, the encodings say {bw}"
    names = [o.name for o in fl.get_outputs()]
    ref = [fl.run(None, f) for f in feeds]
    ours = [qdq.run(None, f) for f in feeds]
    aimet = [sim.session.run(None, f) for f in feeds]
    rows = {}
    for j, name in enumerate(names):
        r = np.stack([x[j] for x in ref])
        rows[name] = (round(snr_db(r, np.stack([x[j] for x in aimet])), 2), round(snr_db(r, np.stack([x[j] for x in ours])), 2))
    report("qnn-bundle-aimet", graph=g, precision="w4a16", snr_db_aimet_vs_ours=rows)
    for name, (s_aimet, s_ours) in rows.items():
        assert abs(s_aimet - s_ours) <= 1.0, f"{g}.{name}: AIMET QuantSim {s_aimet:.2f} dB, bundle's QDQ graph {s_ours:.2f} dB"
