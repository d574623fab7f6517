# real-common.sh: sourced by real-eval.sh and rotation-eval.sh with work and
# bin set. It sets model (the real model's folder) and ids (the held-out text
# as ids in WORK_DIR/heldout.ids: sparkconv tokenize with the model's
# tokenizer.json, no BOS, as llama-perplexity reads the file; the same token
# stream as --samples, and with --ids the greedy test takes a prompt of 32
# tokens every 128 tokens, where --samples would take one per sample).
model=${SPARKCONV_REAL_CACHE:-$HOME/.cache/sparkconv/real}/smollm2-135m-spark
text=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/testdata/real/heldout.txt
mkdir -p "$work"
ids=$work/heldout.ids
if [ ! -f "$ids" ]; then
	python3 -c 'import json, sys; print(json.dumps({"text": open(sys.argv[1], encoding="utf-8").read()}))' "$text" |
		"$bin" tokenize --tokenizer "$model/tokenizer.json" |
		python3 -c 'import json, sys; print(" ".join(map(str, json.loads(sys.stdin.readline())["ids"])))' >"$ids.tmp"
	mv "$ids.tmp" "$ids"
fi
