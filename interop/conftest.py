"""Shared fixtures of the interop suite.

Every test plays a real consumer (PyTorch, compressed-tensors, GPTQModel,
ONNX / ONNX Runtime, Hugging Face tokenizers) on files that the sparkconv
binary writes here, from checkpoints that `sparkconv fixture` generates here:
nothing is read from a checked-in conversion.

The binary is $SPARKCONV_BIN when set, else built once from this checkout
with `go build`. With $SPARKCONV_REQUIRE_INTEROP=1 (or CI=true, as .ci/run
sets it) a missing library fails the test instead of skipping it.
"""

import importlib
import json
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent

# The generated checkpoints every format test runs on: (preset, untied).
MODELS = [("tiny", False), ("tiny", True), ("small", False), ("small", True)]
MODEL_IDS = [f"{p}-{'untied' if u else 'tied'}" for p, u in MODELS]


def required() -> bool:
    return os.environ.get("SPARKCONV_REQUIRE_INTEROP") == "1" or os.environ.get("CI") == "true"


def need(module: str):
    """Imports a consumer library: skips when absent, fails in CI."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if required():
            pytest.fail(f"{module} is not installed ({e}); run .ci/run or `make interop`", pytrace=False)
        pytest.skip(f"{module} is not installed")


class Sparkconv:
    """Runs the sparkconv binary; failures show its stderr."""

    def __init__(self, path: pathlib.Path):
        self.path = path

    def run(self, *args, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        p = subprocess.run([str(self.path), *map(str, args)], input=stdin, capture_output=True, text=True)
        if check and p.returncode != 0:
            raise AssertionError(f"sparkconv {' '.join(map(str, args))} exited {p.returncode}:\n{p.stderr}")
        return p

    def json(self, *args, stdin: str | None = None) -> dict:
        return json.loads(self.run(*args, "--json", stdin=stdin).stdout)


@pytest.fixture(scope="session")
def sparkconv(tmp_path_factory) -> Sparkconv:
    env = os.environ.get("SPARKCONV_BIN")
    if env:
        return Sparkconv(pathlib.Path(env))
    out = tmp_path_factory.mktemp("bin") / "sparkconv"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/sparkconv"], cwd=REPO, check=True)
    return Sparkconv(out)


class Workspace:
    """Generated checkpoints and their conversions, each made once per session."""

    def __init__(self, sc: Sparkconv, root: pathlib.Path):
        self.sc, self.root, self.cache = sc, root, {}

    def _once(self, key: str, make) -> pathlib.Path:
        if key not in self.cache:
            out = self.root / key
            make(out)
            self.cache[key] = out
        return self.cache[key]

    def model(self, preset: str, untied: bool) -> pathlib.Path:
        name = f"{preset}-{'untied' if untied else 'tied'}"
        flags = ["--untied"] if untied else []
        return self._once(name, lambda out: self.sc.run("fixture", "--preset", preset, "--out", out, *flags))

    def convert(self, cmd: str, preset: str, untied: bool, *flags: str) -> pathlib.Path:
        """Runs `sparkconv CMD --model M --out O FLAGS` once; returns O.

        The quantizers calibrate (their default) on tiny, so a real consumer
        loads calibrated GPTQ codes; on small they round to nearest (--rtn):
        the format and the kernels under test are the same, and the small
        model's calibration would cost minutes per conversion."""
        model = self.model(preset, untied)
        if preset == "small" and cmd in ("w8a8", "w4a16", "gptq", "w4a8-zp") and "--rtn" not in flags:
            flags = (*flags, "--rtn")
        key = f"{model.name}.{cmd}{''.join(flags).replace('-', '_')}"
        return self._once(key, lambda out: self.sc.run(cmd, "--model", model, "--out", out, *flags))


@pytest.fixture(scope="session")
def work(sparkconv, tmp_path_factory) -> Workspace:
    return Workspace(sparkconv, tmp_path_factory.mktemp("work"))


def snr_db(ref, got) -> float:
    """10 log10(sum ref^2 / sum (ref - got)^2), in float64; inf when equal."""
    import numpy as np

    ref = np.asarray(ref, dtype=np.float64)
    err = ref - np.asarray(got, dtype=np.float64)
    noise = float(np.sum(err * err))
    return float("inf") if noise == 0 else 10 * np.log10(float(np.sum(ref * ref)) / noise)


def load_safetensors(folder: pathlib.Path) -> dict:
    """Every tensor of every *.safetensors file in folder, as torch tensors."""
    st = need("safetensors.torch")
    sd = {}
    for f in sorted(folder.glob("*.safetensors")):
        sd.update(st.load_file(str(f)))
    return sd


def config(folder: pathlib.Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def report(section: str, **rows):
    """Appends measured figures to $INTEROP_REPORT (a JSON-lines file) so the
    interop table of docs/formats.md can be regenerated from a run; printed
    with -s as well."""
    line = json.dumps({"test": section, **rows}, sort_keys=True)
    print(line)
    dest = os.environ.get("INTEROP_REPORT")
    if dest:
        with open(dest, "a") as f:
            f.write(line + "\n")


def top1_agreement(ref, got):
    """Positions (rows) whose argmax agrees. A position may differ only where
    the reference's top-2 margin is within twice that row's largest logit
    error (a near-tie that the reduced precision may flip); anything else
    fails. Returns (agreeing positions, [(position, margin, error)])."""
    import numpy as np

    ref, got = np.atleast_2d(np.asarray(ref, np.float64)), np.atleast_2d(np.asarray(got, np.float64))
    err = np.abs(ref - got).max(-1)
    top2 = np.sort(ref, axis=-1)[:, -2:]
    margin = top2[:, 1] - top2[:, 0]
    flips = [int(t) for t in np.nonzero(ref.argmax(-1) != got.argmax(-1))[0]]
    for t in flips:
        assert margin[t] < 2 * err[t], f"position {t}: top-1 differs though the margin {margin[t]:.4g} exceeds 2 x error {err[t]:.4g}"
    return len(ref) - len(flips), [(t, round(float(margin[t]), 4), round(float(err[t]), 4)) for t in flips]
