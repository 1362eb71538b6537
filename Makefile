GO ?= go
TINYGO_FLAGS = -scheduler=none -target=wasip1 -buildmode=wasi-legacy -no-debug

.PHONY: test vet deps kongmanager-screenshots bench bench-proxy bench-report bench-redis-cpu tinygo tinygo-check wasm run fuzz report report-adaptive faults generate

## test: every test with the race detector, and the algorithms built and run under TinyGo.
## Installs redis-server, deck, chromium (and TinyGo's Debian packages) when missing, and the npm
## packages of Kong Manager's plugin form and the official LLM clients (cached by lockfile); builds
## diana.wasm.
test: deps vet tinygo-check wasm
	$(GO) test -run '^$$' -bench . -benchtime 1x ./bench/ # the benchmarks still run
	$(GO) test -race -count=1 -parallel 4 -timeout 30m ./... # the compiled filter under the race detector takes minutes; 10m, the default, leaves no room on a loaded machine

vet:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...

deps:
	@build/need-packages.sh
	@build/kongmanager.sh >/dev/null
	@build/llmclients.sh >/dev/null

## bench: the benchmarks, each beside its anchor (x/time/rate, go-redis/redis_rate, ...), and the
## Kong plugin's and the Envoy filter's cost per request beside an empty plugin and filter
bench: deps wasm
	$(GO) test -run '^$$' -bench . -benchmem -count 6 ./bench/
	$(GO) test -run '^$$' -bench Request -benchtime 3000x -count 5 ./kongplugin/ ./wasmfilter/

## tinygo: provisions TinyGo from the Go module proxy and Debian's LLVM 19 (cached)
tinygo:
	@build/tinygo.sh

## tinygo-check: shared/algos compiles under TinyGo and runs as a WASI module (under Node's WASI)
tinygo-check:
	@TINYGO=$$(build/tinygo.sh) && "$$TINYGO" build -o bin/tinygocheck.wasm $(TINYGO_FLAGS) ./build/tinygocheck
	@command -v node >/dev/null || { echo "node is needed to run bin/tinygocheck.wasm"; exit 1; }
	@node --no-warnings -e 'const {WASI}=require("node:wasi");const w=new WASI({version:"preview1"});WebAssembly.instantiate(require("fs").readFileSync(process.argv[1]),w.getImportObject()).then(({instance})=>process.exit(w.start(instance)))' bin/tinygocheck.wasm
	@ls -l bin/tinygocheck.wasm

## wasm: builds bin/diana.wasm, the Envoy filter (TinyGo, provisioned by build/tinygo.sh)
wasm:
	@TINYGO=$$(build/tinygo.sh) && "$$TINYGO" build -o bin/diana.wasm $(TINYGO_FLAGS) ./wasmfilter
	@ls -l bin/diana.wasm

## bench-proxy: dianad (three rules, local mode) under wrk beside its anchor, a plain
## httputil.ReverseProxy, and nginx, each in its own process on loopback (about 2 minutes);
## PROXYLOAD_FLAGS passes flags to bench/proxyload (e.g. -rounds 5 -json bin/proxy.json)
bench-proxy: deps
	@command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
	$(GO) build -o bin/dianad ./cmd/dianad
	$(GO) build -o bin/proxyload ./bench/proxyload
	bin/proxyload $(PROXYLOAD_FLAGS)

## bench-report: runs bench-proxy's load, the Memory, Redis, RLS, MultiRule, RLSMulti, RLQS and
## UsageStream benchmarks and the RLQS split's accuracy tests, and writes docs/performance.md, its
## charts (docs/img/performance-*.svg) and the quotes of it in README.md, docs/envoy.md, docs/api.md
## and docs/llm.md (about 10 minutes; QUICK=1: about 4)
bench-report: deps
	@command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
	$(GO) build -o bin/dianad ./cmd/dianad
	$(GO) build -o bin/proxyload ./bench/proxyload
	$(GO) run ./bench/report $(if $(QUICK),-quick)

## bench-redis-cpu: Redis CPU per decision of each script, in instructions counted by callgrind
bench-redis-cpu: deps
	@command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind >/dev/null; }
	$(GO) run ./bench/rediscpu

## run: the demo: dianad in local mode with examples/diana.yaml (no Redis needed); Ctrl-C stops it
run:
	$(GO) build -o bin/dianad ./cmd/dianad
	@echo 'dianad: proxy on http://localhost:8080 (built-in demo upstream), admin on http://127.0.0.1:9090'
	@echo 'Try it from another terminal:'
	@echo '  curl -i http://localhost:8080/                 # RateLimit-Limit, -Remaining, -Reset headers'
	@printf '%s\n' "  for i in \$$(seq 1 8); do curl -s -o /dev/null -w '%{http_code}\\n' http://localhost:8080/; done   # 200 until the bucket of 5 is empty, then 429"
	@echo '  curl -s http://127.0.0.1:9090/metrics | grep diana_'
	@printf '%s\n' "  curl -i -H 'X-Api-Key: k1' -d '{\"max_tokens\":500,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}' http://localhost:8080/v1/chat/completions   # a token budget: RateLimit-Remaining in tokens"
	@printf '%s\n' "  curl -N -H 'X-Api-Key: k1' -H 'X-Fake-Delay: 50ms' -d '{\"stream\":true,\"stream_options\":{\"include_usage\":true}}' http://localhost:8080/v1/chat/completions   # a stream, charged when it ends"
	@echo "  curl -s -X POST http://127.0.0.1:9090/v1/check -d '{\"client_ip\":\"192.0.2.1\",\"path\":\"/\"}'"
	bin/dianad --config examples/diana.yaml

## generate: every generated file, by the //go:generate directives of the packages that own
## them: schema's (schema/internal/gen: the JSON Schemas from the config readers with schema/src
## and from shared/rules' algorithm registry, and the tables of README.md and
## docs/configuration.md) and shared/algos' (its tests' golden vectors, testdata/golden.json,
## which the Lua scripts are tested against). A second run changes nothing; make test fails when
## a generated file is stale. Not here: kongplugin/testdata/kongmanager/form.json, what Kong
## Manager's form shows in a browser (go test ./kongplugin -run TestKongManagerForm -update-form),
## and the measured reports (make report, make bench-report)
generate:
	$(GO) generate ./...

## kongmanager-screenshots: docs/img/kongmanager-*.png, Kong Manager's plugin form as
## TestKongManagerForm drives it in headless Chromium (used by docs/kong.md)
kongmanager-screenshots: deps
	DIANA_SCREENSHOTS=$(CURDIR)/docs/img $(GO) test -count=1 -run '^TestKongManagerForm$$' ./kongplugin/

## fuzz: every fuzz target (go test -fuzz) for FUZZTIME each (default 10s); CI runs it for 5s each
fuzz:
	@build/fuzz.sh

## report: the accuracy report: docs/accuracy.json, docs/accuracy.md rendered from it, its charts in docs/img
## and its quotes in README.md (virtual time; starts its own redis-server)
report: deps
	$(GO) run ./cmd/dianasim -out docs -readme README.md

## report-adaptive: the adaptive-limit study, docs/adaptive.md and docs/img/adaptive-*.svg (virtual time, seconds)
report-adaptive:
	$(GO) run ./cmd/adaptivesim -out docs

## faults: the fault matrix (dianad and the Kong plugin × Redis killed, paused, slowed, restarted,
## failed over × on_error open, closed, local), as Markdown in bin/faults.md
faults: deps
	@mkdir -p bin && rm -f bin/faults.md
	DIANA_FAULTS_OUT=$(CURDIR)/bin/faults.md $(GO) test -count=1 -p 1 -timeout 15m -run '^TestFaultMatrix$$' ./server/ ./kongplugin/
	@cat bin/faults.md
