# sparkconv: make demo runs the main job on a generated model; make test runs the tests.
GO      ?= go
BIN     := ./sparkconv
DEMO    := demo
export SPARKCONV_ORT_LIB ?= $(CURDIR)/.ort/libonnxruntime.so

.PHONY: build test demo bench fuzz ort clean vet

build:
	$(GO) build -o $(BIN) ./cmd/sparkconv

vet:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...

test: vet ort
	$(GO) test -count=1 -timeout 20m ./...

ort:
	scripts/install-ort.sh

demo: build ort
	rm -rf $(DEMO) && mkdir -p $(DEMO)
	$(BIN) fixture --preset tiny --out $(DEMO)/model
	$(BIN) inspect --model $(DEMO)/model
	$(BIN) w8a8 --model $(DEMO)/model --out $(DEMO)/w8a8
	$(BIN) gptq --model $(DEMO)/model --out $(DEMO)/gptq-w4a8 --group 128 --quant-head
	$(BIN) w4a16 --model $(DEMO)/model --out $(DEMO)/w4a16 --group 128 --quant-head
	$(BIN) calibrate --model $(DEMO)/model --samples fixtures/corpus/calib.txt --out $(DEMO)/calib --seq-len 256
	$(BIN) export-onnx --model $(DEMO)/model --out $(DEMO)/onnx --layout auto --context 64
	$(BIN) lint $(DEMO)/onnx/layer_00.onnx
	$(BIN) verify --model $(DEMO)/model --export $(DEMO)/onnx

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
