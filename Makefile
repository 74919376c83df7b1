# agenthost: see README.md. Every target works from a clean clone with Go
# alone: the Go tools (staticcheck, the protoc plugins) are pinned by the
# tool directive in tools/go.mod and built on first use; tests whose system
# part (protoc, gnome-keyring, Chromium, node) is missing skip loudly, and
# fail under CI=true, where .ci/run has installed them.

MODULES      := ext settings secrets catalog ext-mcp ext-runner ext-codemode host examples
PKG          := github.com/agenthost/agenthost
GO           ?= go

# Go tools, pinned in tools/go.mod (`go get -tool` there to change one) and
# built into .tools/bin from the module cache.
TOOLBIN      := $(CURDIR)/.tools/bin
export PATH  := $(TOOLBIN):$(PATH)

BINARIES := $(PKG)/host/cmd/agenthost $(PKG)/ext-mcp/cmd/agenthost-ext-mcp $(PKG)/ext-runner/cmd/agenthost-ext-runner $(PKG)/ext-codemode/cmd/agenthost-ext-codemode $(PKG)/examples/hello $(PKG)/examples/embed \
	$(PKG)/examples/servers/notes $(PKG)/examples/servers/bearer $(PKG)/examples/servers/oauth $(PKG)/examples/fakeagent
CONFIG   ?= examples/agenthost.json

.PHONY: all build run test test-go lint fmt vet staticcheck nobinaries bench proto tools release-tools licenses dist dist-check clean

all: build

## The version stamped into the binaries: the newest v* tag (with the
## commits since and -dirty), else dev. The toolchain stamps the commit and
## its date (-buildvcs; in a go.work workspace only when asked for).
VERSION  ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X $(PKG)/host.Version=$(VERSION) -X $(PKG)/ext-mcp.Version=$(VERSION) -X $(PKG)/ext-runner.Version=$(VERSION) -X $(PKG)/ext-codemode.Version=$(VERSION)
BUILDVCS := $(if $(wildcard .git),-buildvcs=true,)

build:
	@mkdir -p bin
	$(GO) build $(BUILDVCS) -ldflags "$(LDFLAGS)" -o bin/ $(BINARIES)

## run: the host with ext-mcp, the example servers and the demo config,
## on embedded defaults (SQLite, an encrypted secrets file under .agenthost);
## prints the settings URL, a sign-in link and an MCP token for user "demo".
## The opt-in "web" server is the example bearer server, started beside it.
run: build
	@./bin/bearer -addr 127.0.0.1:7778 & bearer=$$!; \
	trap 'kill $$bearer 2>/dev/null' EXIT INT TERM; \
	./bin/agenthost --config $(CONFIG) serve --demo-user demo

## test: lint, then every module's tests with -race (ext alone with GOWORK=off).
## gotestsum prints a line per package as it finishes and, at the end, every
## skipped test with its reason (a missing part skips loudly on a laptop and
## fails under CI=true), then the failures.
GOTESTSUM := $(TOOLBIN)/gotestsum --format pkgname --format-icons text --format-hide-empty-pkg
## Under CI=true (.ci/run) make test is the full tier: it also builds the
## release and checks it (dist-check, about 16 minutes cold, 3 warm).
test: lint test-go $(if $(filter true,$(CI)),dist-check)

test-go: tools
	@echo "== tests: ext (GOWORK=off)"
	cd ext && GOWORK=off $(GOTESTSUM) -- -race -count=1 ./...
	@echo "== tests: $(filter-out ext,$(MODULES))"
	$(GOTESTSUM) -- -race -count=1 $(foreach m,$(filter-out ext,$(MODULES)),$(PKG)/$(m)/...)

lint: fmt vet staticcheck nobinaries

# nobinaries: no built program is committed (a `go build` in a command's
# folder leaves one there); every tracked file must be text or a known asset.
nobinaries:
	@echo "== lint: no committed binaries"
	@out=$$(git ls-files -z | xargs -0 file --mime-type 2>/dev/null | grep -E 'application/(x-executable|x-pie-executable|x-sharedlib|x-mach-binary|x-dosexec)' || true); \
	if [ -n "$$out" ]; then echo "built binaries are committed (git rm --cached them):"; echo "$$out"; exit 1; fi

fmt:
	@echo "== lint: gofmt"
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	@echo "== lint: go vet"
	cd ext && GOWORK=off $(GO) vet ./...
	$(GO) vet $(foreach m,$(filter-out ext,$(MODULES)),$(PKG)/$(m)/...)

staticcheck: tools
	@for m in $(MODULES); do echo "== lint: staticcheck $$m"; (cd $$m && $(TOOLBIN)/staticcheck ./...) || exit 1; done

## bench: every benchmark, each printing our figure beside its baseline
bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s $(foreach m,$(MODULES),$(PKG)/$(m)/...)

## proto: regenerate ext/internal/extpb from ext/proto (needs protoc)
proto: tools
	ext/gen.sh

## tools: build the pinned Go tools of tools/go.mod into .tools/bin (cached)
tools:
	cd tools && GOWORK=off $(GO) build -o $(TOOLBIN)/ tool

## dist: the release into dist/: archives for linux and darwin on amd64 and
## arm64 with checksums.txt (GoReleaser, .goreleaser.yaml), then the .deb and
## .rpm of each linux arch (nfpm, packaging/nfpm.yaml) on those binaries.
## Times are the commit's (SOURCE_DATE_EPOCH, COMMIT_DATE: from git here, not
## GoReleaser's git state, which is empty in a clone without a remote), so a
## rebuild is identical.
## GoReleaser and nfpm are pinned in their own tools/release/go.mod, built
## on first use (minutes); `make test` builds them only under CI=true.
## The packages' version (packaging/pkgversion.sh): v0.1.0-3-gabc -> 0.1.0+3.gabc.
PKGVERSION := $(shell packaging/pkgversion.sh '$(VERSION)')
DIST_ARCHS := amd64 arm64
export SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)
export COMMIT_DATE ?= $(shell git log -1 --format=%cI 2>/dev/null)

release-tools: $(TOOLBIN)/goreleaser $(TOOLBIN)/nfpm
$(TOOLBIN)/goreleaser $(TOOLBIN)/nfpm: tools/release/go.mod tools/release/go.sum
	cd tools/release && GOWORK=off $(GO) build -o $(TOOLBIN)/ tool

## licenses: the licence and notice files of every third-party module in
## the two binaries (linux and darwin), with the source that MPL-2.0 asks
## to be offered, into .build/third_party, which the archives and packages
## carry (go-licenses, pinned in tools/licenses/go.mod). go-licenses does
## not recognise two: segmentio/asm's MIT-0 licence and the Apache-2.0
## thrift code vendored inside otel's jaeger exporter (LICENSE and NOTICE
## in its own folder); they are copied by name.
LICENSES := .build/third_party
$(TOOLBIN)/go-licenses: tools/licenses/go.mod tools/licenses/go.sum
	cd tools/licenses && GOWORK=off $(GO) build -o $(TOOLBIN)/ tool

licenses: $(TOOLBIN)/go-licenses
	@chmod -R u+w $(dir $(LICENSES)) 2>/dev/null; rm -rf $(LICENSES) && mkdir -p $(LICENSES)
	for os in linux darwin; do \
		GOOS=$$os $(TOOLBIN)/go-licenses save ./host/cmd/agenthost ./ext-mcp/cmd/agenthost-ext-mcp ./ext-runner/cmd/agenthost-ext-runner ./ext-codemode/cmd/agenthost-ext-codemode --save_path $(LICENSES).$$os --force \
			--ignore $(PKG) --ignore github.com/segmentio/asm --ignore go.opentelemetry.io/otel/exporters/jaeger/internal/third_party/thrift \
			2>$(LICENSES).$$os.log || { grep -v '^W' $(LICENSES).$$os.log; echo "licenses: go-licenses failed for $$os (above)"; exit 1; }; \
		chmod -R u+w $(LICENSES).$$os && cp -R $(LICENSES).$$os/. $(LICENSES)/ && rm -rf $(LICENSES).$$os $(LICENSES).$$os.log || exit 1; \
	done
	@cd host && for m in github.com/segmentio/asm:. go.opentelemetry.io/otel/exporters/jaeger:internal/third_party/thrift; do \
		mod=$${m%%:*}; sub=$${m#*:}; dir=$$($(GO) list -m -f '{{.Dir}}' $$mod) && [ -n "$$dir" ] || exit 1; \
		mkdir -p ../$(LICENSES)/$$mod/$$sub && cp $$dir/$$sub/LICENSE* ../$(LICENSES)/$$mod/$$sub/ || exit 1; \
		cp $$dir/$$sub/NOTICE* ../$(LICENSES)/$$mod/$$sub/ 2>/dev/null || true; \
	done
	@chmod -R u+w,go+r $(LICENSES)
	@echo "licenses: $$(find $(LICENSES) -name 'LICENSE*' | wc -l) licence files in $(LICENSES)"

dist: release-tools licenses
	VERSION=$(VERSION) $(TOOLBIN)/goreleaser release --snapshot --clean
	@for a in $(DIST_ARCHS); do \
		d=dist/pkgroot/linux_$$a; mkdir -p $$d && \
		cp dist/agenthost_linux_$$a*/agenthost dist/agenthost-ext-mcp_linux_$$a*/agenthost-ext-mcp dist/agenthost-ext-runner_linux_$$a*/agenthost-ext-runner dist/agenthost-ext-codemode_linux_$$a*/agenthost-ext-codemode $$d/ && \
		for p in deb rpm; do \
			VERSION=$(PKGVERSION) ARCH=$$a BINDIR=$$d LICENSESDIR=$(LICENSES) $(TOOLBIN)/nfpm package --config packaging/nfpm.yaml --packager $$p --target dist/ || exit 1; \
		done; \
	done
	cd dist && sha256sum *.tar.gz *.deb *.rpm > checksums.txt
	@ls -l dist/*.tar.gz dist/*.deb dist/*.rpm dist/checksums.txt

## dist-check: make dist, then check what it built (packaging/dist-check.sh):
## checksums, every archive and package with its contents, the version the
## binary names, the .rpm with rpm(8), and a second build byte for byte the same.
dist-check: dist
	packaging/dist-check.sh $(VERSION)

clean:
	rm -rf bin .tools dist .build
