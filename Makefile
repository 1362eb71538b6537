GO ?= go

.PHONY: test vet deps bench
## test: every test, with the race detector; installs redis-server when missing
test: deps vet
	$(GO) test -race -count=1 ./...

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { gofmt -l .; echo "gofmt needed"; exit 1; }
	$(GO) vet ./...

deps:
	@build/need-redis.sh

## bench: the benchmarks, each beside its anchor (x/time/rate, go-redis/redis_rate)
bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -count 6 ./bench/
