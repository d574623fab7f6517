#!/usr/bin/env bash
# install.sh: the peers' Python environments, each with exactly the packages
# pinned in scripts/peers/requirements-NAME.txt (installed with --no-deps:
# the file is the whole environment).
#
#   scripts/peers/install.sh [NAME...]   NAME: llmcompressor, gptqmodel (default: both)
#
# Each environment lives in a cache folder named by the sha256 of its
# requirements file ($SPARKCONV_PEERS_CACHE, default ~/.cache/sparkconv) and
# scripts/peers/.venv-NAME links to it, as interop/install.sh does: a fresh
# clone on the same machine reuses it at once. A half-built environment (no
# stamp) is removed and rebuilt.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-python3}"
cache="${SPARKCONV_PEERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sparkconv}"

# What each environment must import, and the versions it reports.
declare -A check=(
	[llmcompressor]='import compressed_tensors, llmcompressor, torch, transformers
print("llmcompressor %s, compressed-tensors %s, torch %s (%s), transformers %s" % (llmcompressor.__version__,
      compressed_tensors.__version__, torch.__version__, torch.backends.cpu.get_cpu_capability(), transformers.__version__))'
	[gptqmodel]='import auto_round, gptqmodel, torch, transformers
print("gptqmodel %s, auto-round %s, torch %s (%s), transformers %s" % (gptqmodel.__version__, auto_round.__version__,
      torch.__version__, torch.backends.cpu.get_cpu_capability(), transformers.__version__))'
)

install() {
	local name=$1 req="$here/requirements-$1.txt"
	[[ -f "$req" && -n "${check[$name]:-}" ]] || { echo "install.sh: unknown environment $name (llmcompressor or gptqmodel)" >&2; exit 2; }
	local hash venv stamp start
	hash="$(sha256sum "$req" | cut -c1-16)"
	venv="$cache/peers-$name-$hash"
	stamp="$venv/.installed"
	if [[ -f "$stamp" && -x "$venv/bin/python" ]]; then
		ln -sfn "$venv" "$here/.venv-$name.tmp" && mv -Tf "$here/.venv-$name.tmp" "$here/.venv-$name"
		echo "install.sh: $venv ($(basename "$req") $hash) is installed"
		return
	fi
	start=$SECONDS
	mkdir -p "$cache"
	rm -rf "$venv"
	"$py" -m venv "$venv"
	"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile --no-deps -r "$req"
	# Every module the peer scripts import must import; a broken install fails here.
	"$venv/bin/python" -c "${check[$name]}"
	touch "$stamp"
	ln -sfn "$venv" "$here/.venv-$name.tmp" && mv -Tf "$here/.venv-$name.tmp" "$here/.venv-$name"
	echo "install.sh: installed $venv in $((SECONDS - start)) s ($(du -sh "$venv" | cut -f1))"
}

command -v "$py" >/dev/null || { echo "install.sh: $py not found (Python 3.11 is required)" >&2; exit 1; }
ver="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
[[ "$ver" == "3.11" ]] || { echo "install.sh: the requirements pin cp311 wheels; $py is Python $ver" >&2; exit 1; }
[[ $# -gt 0 ]] || set -- llmcompressor gptqmodel
for name in "$@"; do
	install "$name"
done
