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
