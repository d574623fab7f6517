#!/usr/bin/env bash
# install.sh: the interop suite's Python environment, with exactly the
# packages pinned in interop/requirements.txt (installed with --no-deps: the
# file is the whole environment; see its header for what is left out of
# torch's CUDA dependencies and why).
#
#   interop/install.sh     then interop/.venv/bin/python runs the suite
#
# The environment lives in a cache folder named by the sha256 of
# requirements.txt ($SPARKCONV_INTEROP_CACHE, default ~/.cache/sparkconv),
# and interop/.venv links to it: a fresh clone on the same machine (a CI
# rerun, another worktree) reuses it at once, a fresh machine installs it
# (pip's own cache, ~/.cache/pip, then spares the downloads of a reinstall).
# A half-built environment (no stamp) is removed and rebuilt.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
req="$here/requirements.txt"
py="${PYTHON:-python3}"
hash="$(sha256sum "$req" | cut -c1-16)"
cache="${SPARKCONV_INTEROP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sparkconv}"
venv="$cache/interop-$hash"
stamp="$venv/.installed"

link() { ln -sfn "$venv" "$here/.venv.tmp" && mv -Tf "$here/.venv.tmp" "$here/.venv"; }

if [[ -f "$stamp" && -x "$venv/bin/python" ]]; then
  link
  echo "interop/install.sh: $venv (requirements.txt $hash) is installed"
  exit 0
fi

command -v "$py" >/dev/null || { echo "interop/install.sh: $py not found (Python 3.11 is required)" >&2; exit 1; }
ver="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
[[ "$ver" == "3.11" ]] || { echo "interop/install.sh: requirements.txt pins cp311 wheels; $py is Python $ver" >&2; exit 1; }

start=$SECONDS
mkdir -p "$cache"
rm -rf "$venv"
"$py" -m venv "$venv"
# --no-compile: no .pyc for the ~20k modules of torch and friends up front;
# Python compiles the few the suite imports on first use.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile --no-deps -r "$req"
# Every module the suite imports must import; a broken install fails here, not mid-suite.
"$venv/bin/python" - <<'PY'
import aimet_onnx.quantsim, compressed_tensors, gptqmodel, numpy, onnx, onnxruntime, pytest, safetensors, tokenizers, torch, transformers
print("interop/install.sh: torch %s (%s), onnx %s, onnxruntime %s, tokenizers %s, transformers %s, compressed-tensors %s, gptqmodel %s"
      % (torch.__version__, torch.backends.cpu.get_cpu_capability(), onnx.__version__, onnxruntime.__version__,
         tokenizers.__version__, transformers.__version__, compressed_tensors.__version__, gptqmodel.__version__))
PY
touch "$stamp"
link
echo "interop/install.sh: installed $venv in $((SECONDS - start)) s ($(du -sh "$venv" | cut -f1))"
