#!/bin/bash
# rotation-eval.sh: the real model's builds with and without the residual
# rotation (sparkconv rotate), scored on the held-out text as
# docs/rotation.md reports them.
#
# usage: scripts/rotation-eval.sh WORK_DIR [SPARKCONV] [ROW...]
#   Needs the real model (make real-model). WORK_DIR gets the rotated
#   checkpoints, each build, its `sparkconv eval --json` (NAME.eval.json)
#   and log; the original's log-probs are kept in WORK_DIR/base-logits.safetensors.
#   A row whose eval.json exists is skipped; ROW names rows to run (default all).
set -euo pipefail
work=$1 bin=${2:-./sparkconv}
shift $(( $# >= 2 ? 2 : 1 ))
# shellcheck source=scripts/real-common.sh
. "$(dirname "$0")/real-common.sh"
# rot-*: the rotation alone; rotsd-f32: with down_proj smoothing (the default)
for dt in f32 same; do
	[ -d "$work/rot-$dt" ] || "$bin" rotate --model "$model" --out "$work/rot-$dt" --dtype "$dt" --seed 0 --smooth-down 0
done
[ -d "$work/rotsd-f32" ] || "$bin" rotate --model "$model" --out "$work/rotsd-f32" --dtype f32 --seed 0
# rotauto-f32: down_proj smoothing with alpha chosen per layer
[ -d "$work/rotauto-f32" ] || "$bin" rotate --model "$model" --out "$work/rotauto-f32" --dtype f32 --seed 0 --smooth-down auto
# name, input (orig, rot-f32, rot-same, rotsd-f32 or rotauto-f32), command and flags
rows=(
	"rot-f32-float rot-f32 -"
	"rot-same-float rot-same -"
	"w8a8-rtn orig w8a8 --rtn"
	"rot-w8a8-rtn rot-f32 w8a8 --rtn"
	"rot-same-w8a8-rtn rot-same w8a8 --rtn"
	"rot-w8a8-gptq rot-f32 w8a8"
	"rot-w8a8-smooth0.5 rot-f32 w8a8 --smooth 0.5"
	"rot-w4a8-rtn rot-f32 gptq --group 64 --rtn"
	"rot-w4a8-gptq rot-f32 gptq --group 64 --act-order=false"
	"rot-w4a8-gptq-actorder rot-f32 gptq --group 64"
	"rot-w4a16-gptq rot-f32 w4a16 --group 64 --act-order=false"
	"rot-w4a16-gptq-actorder rot-f32 w4a16 --group 64"
	"rotsd-f32-float rotsd-f32 -"
	"rotsd-w8a8-rtn rotsd-f32 w8a8 --rtn"
	"rotsd-w8a8-gptq rotsd-f32 w8a8"
	"rotsd-w4a8-gptq rotsd-f32 gptq --group 64 --act-order=false"
	"rotsd-w4a8-gptq-actorder rotsd-f32 gptq --group 64"
	"rotsd-w4a16-gptq rotsd-f32 w4a16 --group 64 --act-order=false"
	"rotsd-w4a16-gptq-actorder rotsd-f32 w4a16 --group 64"
	"rot-same-w4a8-gptq rot-same gptq --group 64 --act-order=false"
	"rot-same-w4a8-gptq-actorder rot-same gptq --group 64"
	"rot-same-w4a8-kf8 rot-same gptq --group 64 --act-order=false --keep-float 8"
	"w8a8-kf8 orig w8a8 --keep-float 8"
	"rotsd-w8a8-kf8 rotsd-f32 w8a8 --keep-float 8"
	"rotauto-w8a8-gptq rotauto-f32 w8a8"
	"rotauto-w8a8-kf8 rotauto-f32 w8a8 --keep-float 8"
)
want=" $* "
for row in "${rows[@]}"; do
	read -r name input cmd flags <<<"$row"
	[ $# -gt 0 ] && [[ $want != *" $name "* ]] && continue
	[ -f "$work/$name.eval.json" ] && continue
	src=$model
	[ "$input" != orig ] && src=$work/$input
	build=$src
	if [ "$cmd" != - ]; then
		build=$work/$name
		rm -rf "$build"
		echo "== $name: sparkconv $cmd --model $input --out $name $flags"
		# shellcheck disable=SC2086
		nice -n 5 "$bin" $cmd --model "$src" --out "$build" $flags 2>"$work/$name.log"
	fi
	nice -n 5 "$bin" eval --base "$model" --model "$build" --ids "$ids" --ctx 512 --greedy 16 \
		--base-logits "$work/base-logits.safetensors" --json >"$work/$name.eval.json.tmp" 2>>"$work/$name.log"
	mv "$work/$name.eval.json.tmp" "$work/$name.eval.json"
	python3 - "$work/$name.eval.json" "$name" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
k, g = r["kld"], r["greedy"]
print(f"| {sys.argv[2]} | {k['mean']:.4f} ± {k['stderr']:.4f} | {k['p99']:.3f} | {100*r['same_top1']:.1f} % | {r['ppl_ratio']:.3f} | {g['exact']}/{g['prompts']}, {100*g['prefix_kept']:.0f} % kept |")
PY
done
