#!/usr/bin/env bash
# install.sh: the interop suite's Python environment, interop/.venv, with
# exactly the packages pinned in interop/requirements.txt (installed with
# --no-deps: the file is the whole environment; see its header for what is
# left out of torch's CUDA dependencies and why).
#
#   interop/install.sh        (idempotent: nothing to do when .venv matches the pins)
#
# pip's cache (~/.cache/pip, or $PIP_CACHE_DIR) keeps a reinstall fast.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
req="$here/requirements.txt"
stamp="$venv/.requirements.sha256"
py="${PYTHON:-python3}"

want="$(sha256sum "$req" | cut -d' ' -f1)"
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "interop/install.sh: $venv matches requirements.txt"
  exit 0
fi

command -v "$py" >/dev/null || { echo "interop/install.sh: $py not found (Python 3.11 is required)" >&2; exit 1; }
ver="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
[[ "$ver" == "3.11" ]] || { echo "interop/install.sh: requirements.txt pins cp311 wheels; $py is Python $ver" >&2; exit 1; }

start=$SECONDS
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$req"
# Every module the suite imports must import; a broken install fails here, not mid-suite.
"$venv/bin/python" - <<'PY'
import compressed_tensors, gptqmodel, numpy, onnx, onnxruntime, pytest, safetensors, tokenizers, torch, transformers
print("interop/install.sh: torch %s (%s), onnx %s, onnxruntime %s, tokenizers %s, transformers %s, compressed-tensors %s, gptqmodel %s"
      % (torch.__version__, torch.backends.cpu.get_cpu_capability(), onnx.__version__, onnxruntime.__version__,
         tokenizers.__version__, transformers.__version__, compressed_tensors.__version__, gptqmodel.__version__))
PY
echo "$want" > "$stamp"
echo "interop/install.sh: installed in $((SECONDS - start)) s ($(du -sh "$venv" | cut -f1))"
