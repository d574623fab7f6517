# sparkconv: make demo runs the main job on a generated model; make test runs the tests.
GO      ?= go
BIN     := ./sparkconv
DEMO    := demo
export SPARKCONV_ORT_LIB ?= $(CURDIR)/.ort/libonnxruntime.so

.PHONY: build test demo bench fuzz ort clean vet interop interop-env real-model

build:
	$(GO) build -o $(BIN) ./cmd/sparkconv

vet:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...

# In CI (CI=true, as .ci/run runs it) or with INTEROP=1, make test also runs
# the interop suite, which installs its Python environment first.
# The packages whose results depend on the kernel family run once more
# under each forced family other than the native one (which ran in
# ./...): generic everywhere, avx2 on an AVX-512 CPU, and avx512bf16 (with
# GPTQ, whose calibration forward it changes) on a CPU with avx512_bf16.
FAMILY_PKGS := ./kernels ./forward ./eval ./verify ./onnxeval ./rotate
CPU_FLAGS   := avx2|fma|avx512f|avx512dq|avx512bw|avx512_bf16|amx_tile|amx_bf16|amx_int8

test: vet ort
	@echo "make test: CPU$$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); flags: $$(grep -m1 -o -w -E '$(CPU_FLAGS)' /proc/cpuinfo | sort -u | tr '\n' ' ')"
	$(GO) test -count=1 -timeout 20m ./...
	for f in generic avx2 avx512bf16; do \
	  pkgs="$(FAMILY_PKGS)"; \
	  if [ $$f = avx2 ] && ! grep -q -w avx512f /proc/cpuinfo; then continue; fi; \
	  if [ $$f = avx512bf16 ]; then grep -q -w avx512_bf16 /proc/cpuinfo || continue; pkgs="./kernels ./forward ./gptq"; fi; \
	  echo "make test: SPARKCONV_KERNELS=$$f"; \
	  SPARKCONV_KERNELS=$$f $(GO) test -count=1 -timeout 20m $$pkgs || exit 1; \
	done
ifneq ($(filter true 1,$(CI) $(INTEROP)),)
	$(MAKE) interop
else
	@echo "make test: interop suite not run (make interop, or INTEROP=1 make test)"
endif

# The real consumers (PyTorch, compressed-tensors, GPTQModel, onnx,
# onnxruntime, HF tokenizers) loading what sparkconv writes: interop/. The
# real model its test_real_model.py reads is built first (kept as it is when
# its files match scripts/real-model.sha256).
interop: build ort interop-env real-model
	SPARKCONV_BIN=$(CURDIR)/sparkconv SPARKCONV_REQUIRE_INTEROP=1 interop/.venv/bin/python -m pytest -q -p no:cacheprovider interop $(PYTEST_FLAGS)

interop-env:
	interop/install.sh

ort:
	scripts/install-ort.sh

demo: build ort
	rm -rf $(DEMO) && mkdir -p $(DEMO)
	$(BIN) fixture --preset tiny --out $(DEMO)/model
	$(BIN) inspect --model $(DEMO)/model
	# calibrated GPTQ for all three formats: the embedded corpus by default,
	# or --samples; --rtn would round to nearest instead
	$(BIN) w8a8 --model $(DEMO)/model --out $(DEMO)/w8a8 --samples corpus/calib.txt
	$(BIN) gptq --model $(DEMO)/model --out $(DEMO)/gptq-w4a8 --group 128 --quant-head
	$(BIN) w4a16 --model $(DEMO)/model --out $(DEMO)/w4a16 --group 128 --quant-head --act-order
	# the residual rotation with down_proj smoothing, then W8A8 from it
	$(BIN) rotate --model $(DEMO)/model --out $(DEMO)/rotated --dtype f32
	$(BIN) w8a8 --model $(DEMO)/rotated --out $(DEMO)/rotated-w8a8
	$(BIN) calibrate --model $(DEMO)/model --samples corpus/calib.txt --out $(DEMO)/calib --seq-len 256
	$(BIN) export-onnx --model $(DEMO)/model --out $(DEMO)/onnx --layout auto --context 512
	$(BIN) lint $(DEMO)/onnx/layer_00.onnx
	$(BIN) verify --model $(DEMO)/model --export $(DEMO)/onnx
	# the calibrated w8a16 bundle for QNN / AI Hub, simulated in ONNX Runtime
	$(BIN) qnn-bundle --model $(DEMO)/model --export $(DEMO)/onnx --out $(DEMO)/qnn --precision w8a16
	$(BIN) lint $(DEMO)/qnn/layer_03.aimet/layer_03.onnx --encodings $(DEMO)/qnn/layer_03.aimet/layer_03.encodings
	$(BIN) plan --model $(DEMO)/model
	for b in w8a8 rotated-w8a8 gptq-w4a8 w4a16; do \
	  $(BIN) eval --base $(DEMO)/model --model $(DEMO)/$$b --base-logits $(DEMO)/base-logits.safetensors --report $(DEMO)/eval-$$b.html || exit 1; \
	done
	$(BIN) eval --base $(DEMO)/model --export $(DEMO)/onnx --base-logits $(DEMO)/base-logits.safetensors --report $(DEMO)/eval-onnx.html
	$(BIN) eval --base $(DEMO)/model --export $(DEMO)/qnn/qdq --base-logits $(DEMO)/base-logits.safetensors --report $(DEMO)/eval-qnn-w8a16.html

bench:
	$(GO) test -run '^$$' -bench . -benchtime 3x ./...

# Each fuzz target for FUZZTIME (default 30s).
FUZZTIME ?= 30s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

clean:
	rm -rf $(BIN) $(DEMO)

# The real model (SmolLM2-135M-Instruct mapped into the Spark layout) in
# $(SPARKCONV_REAL_CACHE) (default ~/.cache/sparkconv/real): docs/real-model.md.
real-model: build
	scripts/real-model.sh $(CURDIR)/sparkconv
