#!/bin/bash
# real-eval.sh: every sparkconv build of the real model scored on the full
# held-out text, testdata/real/heldout.txt (docs/real-model.md's table).
#
# usage: scripts/real-eval.sh WORK_DIR [SPARKCONV] [ROW...]
#   The real model must be built (make real-model). Each row's build goes to
#   WORK_DIR/NAME, its `sparkconv eval --json` to WORK_DIR/NAME.eval.json and
#   the conversion's stderr to WORK_DIR/NAME.log; the original's log-probs are
#   kept in WORK_DIR/base-logits.safetensors. A row whose eval.json exists is
#   skipped. ROW names a row to run (default: all).
set -euo pipefail
work=$1 bin=${2:-./sparkconv}
shift $(( $# >= 2 ? 2 : 1 ))
# shellcheck source=scripts/real-common.sh
. "$(dirname "$0")/real-common.sh"
rows=(
	"w8a8-rtn w8a8 --rtn"
	"w4a16-gptq-inorder w4a16 --group 64 --act-order=false"
	"w4a8-gptq-inorder gptq --group 64 --act-order=false"
	"w8a8-gptq w8a8"
	"w4a16-rtn w4a16 --group 64 --rtn"
	"w4a16-gptq-actorder w4a16 --group 64"
	"w8a8-smooth0.5 w8a8 --smooth 0.5"
	"w4a8-rtn gptq --group 64 --rtn"
	"w4a8-gptq-actorder gptq --group 64"
	"onnx-fp32 export-onnx --context 512"
	"onnx-fp16 export-onnx --context 512 --dtype fp16"
	"qnn-w8a16 qnn-bundle --precision w8a16"
	"qnn-w16a16 qnn-bundle --precision w16a16"
)
want=" $* "
for row in "${rows[@]}"; do
	read -r name cmd flags <<<"$row"
	[ $# -gt 0 ] && [[ $want != *" $name "* ]] && continue
	[ -f "$work/$name.eval.json" ] && continue
	rm -rf "$work/$name"
	echo "== $name: sparkconv $cmd --model M --out $work/$name $flags"
	# export-onnx rows are scored in ONNX Runtime (eval --export); qnn-bundle
	# rows calibrate the onnx-fp32 row's export and score its QDQ graphs.
	target=(--model "$work/$name")
	case $cmd in
	export-onnx) target=(--export "$work/$name") ;;
	qnn-bundle)
		flags="$flags --export $work/onnx-fp32"
		target=(--export "$work/$name/qdq")
		;;
	esac
	# shellcheck disable=SC2086
	nice -n 5 "$bin" $cmd --model "$model" --out "$work/$name" $flags 2>"$work/$name.log"
	nice -n 5 "$bin" eval --base "$model" "${target[@]}" --ids "$ids" --ctx 512 --greedy 16 \
		--base-logits "$work/base-logits.safetensors" --json >"$work/$name.eval.json.tmp" 2>>"$work/$name.log"
	mv "$work/$name.eval.json.tmp" "$work/$name.eval.json"
	python3 "$(dirname "$0")/real_eval_row.py" "$work/$name.eval.json" "$name"
done
