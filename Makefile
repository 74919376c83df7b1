# agenthost: see README.md. Every target works from a clean clone once
# .ci/run's packages are installed.

MODULES      := ext settings secrets catalog ext-mcp host examples
PKG          := github.com/agenthost/agenthost
GO           ?= go
GOBIN        ?= $(shell $(GO) env GOPATH)/bin
export PATH  := $(GOBIN):$(PATH)

# Pinned code generators (make proto; the staleness test uses the same).
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.0
STATICCHECK_VERSION        := v0.8.2

BINARIES := $(PKG)/host/cmd/agenthost $(PKG)/ext-mcp/cmd/agenthost-ext-mcp $(PKG)/examples/hello \
	$(PKG)/examples/servers/notes $(PKG)/examples/servers/bearer
CONFIG   ?= examples/agenthost.json

.PHONY: all build run test test-go lint fmt vet staticcheck bench proto tools clean

all: build

build:
	@mkdir -p bin
	$(GO) build -o bin/ $(BINARIES)

## run: the host with ext-mcp, the example servers and the demo config,
## on embedded defaults (SQLite, an encrypted secrets file under .agenthost);
## prints the settings URL, a sign-in link and an MCP token for user "demo".
## The opt-in "web" server is the example bearer server, started beside it.
run: build
	@./bin/bearer -addr 127.0.0.1:7778 & bearer=$$!; \
	trap 'kill $$bearer 2>/dev/null' EXIT INT TERM; \
	./bin/agenthost --config $(CONFIG) serve --demo-user demo

## test: lint, then every module's tests with -race (ext alone with GOWORK=off)
test: lint test-go

test-go:
	cd ext && GOWORK=off $(GO) test -race -count=1 ./...
	$(GO) test -race -count=1 $(foreach m,$(filter-out ext,$(MODULES)),$(PKG)/$(m)/...)

lint: fmt vet staticcheck

fmt:
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	cd ext && GOWORK=off $(GO) vet ./...
	$(GO) vet $(foreach m,$(filter-out ext,$(MODULES)),$(PKG)/$(m)/...)

staticcheck:
	@command -v staticcheck >/dev/null || { echo "staticcheck missing: run make tools"; exit 1; }
	for m in $(MODULES); do (cd $$m && staticcheck ./...) || exit 1; done

## bench: every benchmark, each printing our figure beside its baseline
bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s $(foreach m,$(MODULES),$(PKG)/$(m)/...)

## proto: regenerate ext/internal/extpb from ext/proto (needs protoc)
proto: tools
	ext/gen.sh

tools:
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

clean:
	rm -rf bin
