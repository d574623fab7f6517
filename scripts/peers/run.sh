#!/bin/bash
# run.sh: the peers on CPU beside sparkconv, on the real model, scored by
# `sparkconv eval` on the same held-out text (docs/peers.md).
#
# usage: scripts/peers/run.sh WORK_DIR [SPARKCONV] [ROW...]
#   The real model must be built (make real-model) and the peers' venvs
#   installed (scripts/peers/install.sh). Each row's build goes to
#   WORK_DIR/NAME (peers: WORK_DIR/NAME.work holds the tool's own output, the
#   Spark-layout checkpoint WORK_DIR/NAME), its /usr/bin/time -v record to
#   WORK_DIR/NAME.time, each score to WORK_DIR/NAME.SET.eval.json. A row whose
#   scores exist is skipped, so an interrupted run resumes. ROW names the
#   rows to run (default: all, in the order below); two run.sh may share
#   WORK_DIR (each row is locked by WORK_DIR/NAME.lock). The table:
#   python3 scripts/peers/table.py WORK_DIR
set -euo pipefail
work=$(mkdir -p "$1" && cd "$1" && pwd) bin=$(realpath "${2:-./sparkconv}")
shift $(($# >= 2 ? 2 : 1))
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# The calibration tokens every peer gets (calibtokens' dump; the peers'
# scripts read the dump, so they follow it).
peers_budget=${PEERS_TOKENS:-8192}
model=${SPARKCONV_REAL_CACHE:-$HOME/.cache/sparkconv/real}/smollm2-135m-spark
[ -f "$model/model.safetensors" ] || { echo "run.sh: $model is missing: make real-model" >&2; exit 1; }
for v in llmcompressor gptqmodel; do
	[ -x "$here/.venv-$v/bin/python" ] || { echo "run.sh: scripts/peers/.venv-$v is missing: scripts/peers/install.sh" >&2; exit 1; }
done
llmc=$here/.venv-llmcompressor/bin/python gptq=$here/.venv-gptqmodel/bin/python

# The held-out sets: name and file; a file not in the checkout is skipped.
sets=()
for s in heldout heldout-agent; do
	[ -f "$root/testdata/real/$s.txt" ] && sets+=("$s")
done

# Helpers built from scripts/peers (Go, sparkconv's own code).
(cd "$root" && go build -o "$work/calibtokens" ./scripts/peers/calibtokens && go build -o "$work/dequant" ./scripts/peers/dequant)

# The Llama form and its equivalence check, and the calibration chunks.
if [ ! -f "$work/check-llama.json" ]; then
	rm -rf "$work/llama"
	"$gptq" -c "import sys; sys.path.insert(0, '$here'); import spark_llama; spark_llama.to_llama('$model', '$work/llama')"
	python3 -c 'import json, sys; print(" ".join(str(i) for i in json.loads(sys.stdin.readline())["ids"]))' \
		< <(python3 -c 'import json, sys; print(json.dumps({"text": open(sys.argv[1], encoding="utf-8").read()}))' "$root/testdata/real/heldout.txt" |
			"$bin" tokenize --tokenizer "$model/tokenizer.json") >"$work/heldout.ids"
	"$gptq" "$here/check_llama.py" "$bin" "$model" "$work/llama" "$work/heldout.ids" "$work/check-llama.json.tmp"
	mv "$work/check-llama.json.tmp" "$work/check-llama.json"
fi
if [ ! -f "$work/chunks.jsonl" ]; then
	"$work/calibtokens" --model "$model" --tokens "$peers_budget" >"$work/chunks.jsonl.tmp"
	mv "$work/chunks.jsonl.tmp" "$work/chunks.jsonl"
fi

timed() { # timed NAME CMD...: run CMD under /usr/bin/time -v, niced, its log in NAME.log
	local name=$1
	shift
	# A failure is recorded in NAME.failed (the log's last lines) and the
	# run goes on with the next row; a rerun tries the row again.
	rm -f "$work/$name.failed"
	if ! nice -n 5 /usr/bin/time -v -o "$work/$name.time.tmp" "$@" >>"$work/$name.log" 2>&1; then
		# a command killed by a signal says so (time -v then reports exit status 0)
		{ grep -o 'Command terminated by signal [0-9]*' "$work/$name.time.tmp" ||
			echo "exit status $(grep -o 'Exit status: [0-9]*' "$work/$name.time.tmp" | cut -d' ' -f3)"; tail -5 "$work/$name.log"; } >"$work/$name.failed"
		echo "run.sh: $name failed; its log: $work/$name.log" >&2
		cat "$work/$name.failed" >&2
		return 1
	fi
	mv "$work/$name.time.tmp" "$work/$name.time"
}

score() { # score NAME BUILD: sparkconv eval of BUILD on every held-out set
	local name=$1 build=$2 s
	for s in "${sets[@]}"; do
		[ -f "$work/$name.$s.eval.json" ] && continue
		nice -n 5 "$bin" eval --base "$model" --model "$build" --samples "$root/testdata/real/$s.txt" --ctx 512 --greedy 0 \
			--base-logits "$work/base-$s.safetensors" --json >"$work/$name.$s.eval.json.tmp" 2>>"$work/$name.log"
		mv "$work/$name.$s.eval.json.tmp" "$work/$name.$s.eval.json"
		python3 "$here/table.py" --row "$work/$name.$s.eval.json"
	done
}

# sparkconv's checks of its own calibration set against calibtokens' dump.
check_chunks() { # check_chunks BUILD
	python3 - "$1/sparkconv-report.json" "$work/chunks.jsonl" "$peers_budget" <<-'PY'
		import json, sys
		cal = json.load(open(sys.argv[1]))["calibration"]
		if cal["token_budget"] != int(sys.argv[3]):  # a row at another budget than the peers' is not theirs
		    sys.exit(0)
		chunks = [json.loads(l) for l in open(sys.argv[2])]
		got = (len({c["sample"] for c in chunks}), sum(len(c["ids"]) for c in chunks))
		if got != (cal["samples"], cal["tokens"]):
		    sys.exit(f"run.sh: calibtokens dumped {got} samples/tokens, sparkconv calibrated on {(cal['samples'], cal['tokens'])}")
	PY
}

rows=(
	"sparkconv-w4a16 sparkconv w4a16 --group 64 --quant-head"
	"sparkconv-gptq sparkconv gptq --group 64 --quant-head"
	"sparkconv-w4a16-head sparkconv w4a16 --group 64"
	"sparkconv-gptq-head sparkconv gptq --group 64"
	"sparkconv-gptq-head-8k sparkconv gptq --group 64 --tokens $peers_budget"
	"sparkconv-rotate-w8a8 sparkconv-rotate w8a8"
	"llmcompressor-w4a16-sym llmcompressor w4a16-sym"
	"autoround-w4-sym autoround"
	"llmcompressor-w4a16-asym llmcompressor w4a16-asym"
	"llmcompressor-w8a8-sq llmcompressor w8a8-sq"
	"gptqmodel-descact-off gptqmodel"
	"gptqmodel-descact-on gptqmodel"
)
want=" $* "
for row in "${rows[@]}"; do
	read -r name kind args <<<"$row"
	[ $# -gt 0 ] && [[ $want != *" $name "* ]] && continue
	# another run.sh on the same WORK_DIR running this row: leave it to that one
	mkdir "$work/$name.lock" 2>/dev/null || { echo "== $name: skipped, $work/$name.lock says another run.sh has it"; continue; }
	trap 'rmdir "$work/$name.lock"' EXIT
	echo "== $name"
	if [ ! -f "$work/$name.time" ]; then
		rm -rf "${work:?}/$name" "$work/$name.work" "$work/$name.log"
		if ! case $kind in
		sparkconv)
			# shellcheck disable=SC2086
			timed "$name" "$bin" $args --model "$model" --out "$work/$name" && check_chunks "$work/$name"
			;;
		sparkconv-rotate)
			# rotate, then the command: one timing for both (bash -c under time)
			timed "$name" bash -c "'$bin' rotate --model '$model' --out '$work/$name.work' && '$bin' $args --model '$work/$name.work' --out '$work/$name'"
			;;
		llmcompressor)
			mkdir -p "$work/$name.work"
			timed "$name" "$llmc" "$here/llmcompressor_peer.py" "$args" "$work/llama" "$work/chunks.jsonl" "$model" "$work/$name.work" "$work/$name"
			;;
		autoround | gptqmodel)
			mkdir -p "$work/$name.work"
			timed "$name" "$gptq" "$here/gptq_peer.py" "${name%-w4-sym}" "$work/llama" "$work/chunks.jsonl" "$model" "$work/$name.work" "$work/$name"
			;;
		esac; then
			rmdir "$work/$name.lock"
			trap - EXIT
			continue
		fi
	fi
	score "$name" "$work/$name"
	# sparkconv's 4-bit builds once more as weights only: the float32
	# checkpoint of their dequantized weights, as the weight-only peers are scored.
	case $name in
	sparkconv-w4a16 | sparkconv-gptq | sparkconv-w4a16-head | sparkconv-gptq-head | sparkconv-gptq-head-8k)
		[ -d "$work/$name-weights" ] || "$work/dequant" "$work/$name" "$work/$name-weights"
		score "$name-weights" "$work/$name-weights"
		;;
	esac
	rmdir "$work/$name.lock"
	trap - EXIT
done
python3 "$here/table.py" "$work"
