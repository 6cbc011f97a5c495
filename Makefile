# cmrt — make targets. `make test` is the test command CI runs (.ci/run).
#
#   make demo         server + client on loopback over the software fabric
#   make test         vet, gofmt check, all tests with -race, then the
#                     allocation tests without it
#   make bench        benchmarks and baseline comparisons (BENCHMARKS.md)
#   make fuzz         every native fuzz target for FUZZTIME each
#   make interop      in the VM: Go against the kernel's siw and rdma-core's
#                     tools, the kernel fabric on rxe0, and rsocket against
#                     rdma-core's rstream/riostream (builds the VM first)
#   make reliability  fault, load and bad-input tests across network namespaces
#   make diff-kernel  in the VM: DIFF_N random CM call sequences on the software
#                     fabric and the kernel's rdma_cm (siw0, rxe0), journals
#                     compared step by step (DIFF_SEED reproduces a run;
#                     DIFF_BUDGET=seconds bounds it)

# Go: the one on PATH, else the machine's /usr/local/go.
GO       ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
export PATH := $(dir $(GO)):$(PATH)

FUZZTIME ?= 30s
SHARED   ?= $(abspath ../shared)
VM_CACHE ?= $(HOME)/.cache/cmrt-vm
VM_OUT   ?= $(VM_CACHE)/out
VM_DL    ?= $(VM_CACHE)/dl
VM_RUN   ?= $(SHARED)/vm/run.sh
export VM_OUT VM_DL VM_RUN

.PHONY: all demo test vet bench fuzz vm interop interop-siw interop-kernel interop-rsocket reliability diff-kernel clean

all: test

demo:
	$(GO) run ./examples/demo

# The allocation budgets: the race detector's instrumentation allocates, so
# those tests skip or relax their check under -race; they run again
# without it, or CI would never check them.
NORACE_TESTS ?= Alloc|^TestApplyOptions$$|^TestPostConnOrder$$

test: vet
	$(GO) test -race -count=1 -timeout 30m ./...
	$(GO) test -count=1 -timeout 10m -run '$(NORACE_TESTS)' ./...

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

bench:
	scripts/bench.sh

fuzz:
	scripts/fuzz.sh $(FUZZTIME)

vm:
	$(SHARED)/vm/build.sh

interop: interop-siw interop-kernel interop-rsocket

interop-siw: vm
	scripts/interop-siw.sh

interop-kernel: vm
	scripts/interop-kernel.sh

interop-rsocket: vm
	scripts/interop-rsocket.sh

reliability:
	scripts/reliability.sh

DIFF_N ?= 120
diff-kernel: vm
	DIFF_N=$(DIFF_N) DIFF_SEED=$(DIFF_SEED) DIFF_BUDGET=$(DIFF_BUDGET) scripts/diff-kernel.sh

clean:
	$(GO) clean -testcache
