#!/bin/bash
# llama-quantize-anchor.sh: build llama.cpp's llama-quantize from the sdist of
# llama-cpp-python on PyPI (it vendors llama.cpp), write an equal-shape bf16
# GGUF of a Spark checkpoint (spark_to_gguf.py) and time llama-quantize
# beside sparkconv, interleaved, each run under /usr/bin/time -v.
#
# usage: scripts/llama-quantize-anchor.sh MODEL_DIR WORK_DIR [SPARKCONV] [RUNS]
#   WORK_DIR gets the sdist, the build, a venv with gguf, the GGUF (3.4 GB
#   for the full fixture) and times.txt; outputs are deleted after each run.
#   Set LOCK=/work/measure.lock to run each timed command under flock.
# Needs cmake, a C++ compiler, python3 with venv, and PyPI.
set -euo pipefail
model=$1 work=$2 bin=${3:-sparkconv} runs=${4:-3}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work" && cd "$work"
ver=0.3.36
if [ ! -x llama.cpp/build/bin/llama-quantize ]; then
	pip download --no-binary :all: --no-deps "llama-cpp-python==$ver" -d .
	tar xzf "llama_cpp_python-$ver.tar.gz"
	rm -rf llama.cpp && mv "llama_cpp_python-$ver/vendor/llama.cpp" llama.cpp
	cmake -S llama.cpp -B llama.cpp/build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
		-DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
	nice -n 10 cmake --build llama.cpp/build --target llama-quantize -j2
fi
if [ ! -f model-bf16.gguf ]; then
	[ -x venv/bin/python ] || { python3 -m venv venv && venv/bin/pip install -q gguf==0.19.0 numpy; }
	venv/bin/python "$here/spark_to_gguf.py" "$model" model-bf16.gguf
fi
lock=()
[ -n "${LOCK:-}" ] && lock=(flock "$LOCK")
# timed LABEL CMD...: one run, appends "label wall cpu_s rss_kb load" to times.txt
timed() {
	local label=$1; shift
	rm -rf out.tmp out.gguf
	"${lock[@]}" /usr/bin/time -v "$@" >/dev/null 2>time.log || { tail -5 time.log; exit 1; }
	local wall user sys rss
	wall=$(awk -F': ' '/Elapsed/ {print $2}' time.log)
	user=$(awk -F': ' '/User time/ {print $2}' time.log)
	sys=$(awk -F': ' '/System time/ {print $2}' time.log)
	rss=$(awk -F': ' '/Maximum resident/ {print $2}' time.log)
	echo "$label wall=$wall cpu_s=$(echo "$user + $sys" | bc) rss_kb=$rss load=$(cut -d' ' -f1 /proc/loadavg)" | tee -a times.txt
	rm -rf out.tmp out.gguf
}
q=llama.cpp/build/bin/llama-quantize
for i in $(seq "$runs"); do
	timed "llama-quantize Q8_0" $q model-bf16.gguf out.gguf Q8_0 2
	timed "sparkconv w8a8 --rtn" "$bin" w8a8 --rtn --model "$model" --out out.tmp
	timed "llama-quantize Q4_0" $q model-bf16.gguf out.gguf Q4_0 2
	timed "sparkconv gptq --group 128 --quant-head --rtn" "$bin" gptq --group 128 --quant-head --rtn --model "$model" --out out.tmp
	timed "sparkconv w4a16 --group 128 --quant-head --rtn" "$bin" w4a16 --group 128 --quant-head --rtn --model "$model" --out out.tmp
	timed "sparkconv export-onnx --dtype fp16" "$bin" export-onnx --dtype fp16 --model "$model" --out out.tmp
	timed "llama-quantize Q4_K_M" $q model-bf16.gguf out.gguf Q4_K_M 2
done
