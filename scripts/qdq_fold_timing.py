#!/usr/bin/env python3
"""ONNX Runtime's step time for a QDQ graph of qnn-bundle, as written and
with its weights' DequantizeLinear folded (what qnnbundle.FoldWeights does
before the simulation opens a session).

    interop/.venv/bin/python scripts/qdq_fold_timing.py BUNDLE/qdq/layer_00.onnx

One thread, optimization level "basic" (the simulation's), random feeds of
the graph's input shapes, the mean of 10 runs after one warm-up. Prints
"as written: X ms/run", "folded N nodes: Y ms/run" and the largest
relative difference of the two sessions' outputs.
"""
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper


def session(path):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def feeds_for(s):
    rng = np.random.default_rng(0)
    feeds = {}
    for i in s.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        if "int64" in i.type:
            feeds[i.name] = np.zeros(shape, np.int64)
        else:
            feeds[i.name] = (rng.standard_normal(shape) * 0.1).astype(np.float32)
    return feeds


def timed(s, feeds):
    out = s.run(None, feeds)
    t = time.perf_counter()
    for _ in range(10):
        s.run(None, feeds)
    return (time.perf_counter() - t) / 10 * 1000, out


def fold(m):
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    keep, n = [], 0
    for node in g.node:
        if node.op_type == "DequantizeLinear" and all(i in inits for i in node.input):
            q = numpy_helper.to_array(inits[node.input[0]]).astype(np.int32)
            scale = numpy_helper.to_array(inits[node.input[1]]).astype(np.float32)
            zp = numpy_helper.to_array(inits[node.input[2]]).astype(np.int32)
            if scale.size > 1:  # per channel: QDQModel's last axis
                shape = [1] * q.ndim
                shape[-1] = -1
                scale, zp = scale.reshape(shape), zp.reshape(shape)
            w = (q - zp).astype(np.float32) * scale
            g.initializer.append(numpy_helper.from_array(w.astype(np.float32), node.output[0]))
            n += 1
        else:
            keep.append(node)
    del g.node[:]
    g.node.extend(keep)
    return n


def main(path):
    written = session(path)
    feeds = feeds_for(written)
    ms, a = timed(written, feeds)
    print(f"as written: {ms:.1f} ms/run")
    m = onnx.load(path, load_external_data=True)
    n = fold(m)
    with tempfile.TemporaryDirectory() as d:
        folded_path = f"{d}/folded.onnx"
        onnx.save(m, folded_path, save_as_external_data=True, location="folded.data")
        ms, b = timed(session(folded_path), feeds)
    print(f"folded {n} nodes: {ms:.1f} ms/run")
    rel = max(float(np.max(np.abs(x - y)) / max(float(np.max(np.abs(x))), 1e-30)) for x, y in zip(a, b))
    print(f"largest relative output difference: {rel:.3g}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
