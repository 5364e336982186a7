#!/usr/bin/env bash
# Builds the real peers of the fleet delivery tests and caches them outside the repo, keyed by
# version, so only the first run on a machine pays the cold build:
#   registry           the CNCF distribution registry (github.com/distribution/distribution/v3
#                      cmd/registry), which the Flux OCI test pushes each cluster's artifact to;
#   source-controller  Flux's source-controller, which reconciles an OCIRepository from it
#                      (v1.9.6, the release of the kustomize-controller the fleet tests run:
#                      v1.10's dependencies, fluxcd/pkg/artifact v0.27, cosign v3.1.4 and
#                      others, are not served by the module proxy);
#   appset             Argo CD's ApplicationSet controller (argo-cd v3's own command package,
#                      argocd-applicationset-controller) and the Argo CD CRDs it needs.
# Arguments name which to build (default: all); each suite builds only what it runs. Each peer
# lives in its own module: argo-cd v3.6 needs Go 1.27, which the go command fetches from the
# module proxy as the approved toolchain (GOTOOLCHAIN=go1.27.3) for it alone; the project stays
# on the machine's Go.
# Prints the cache directory on its last line; the peers are <dir>/<name>-<version>/.
set -euo pipefail

REGISTRY_VERSION=${DISTRIBUTION_VERSION:-v3.1.2}
SOURCE_VERSION=${FLUX_SOURCE_CONTROLLER_VERSION:-v1.9.6}
ARGOCD_VERSION=${ARGOCD_VERSION:-v3.6.2}
PEER_TOOLCHAIN=${PEER_TOOLCHAIN:-go1.27.3}
CACHE=${GPUPOLICY_CACHE:-$HOME/.cache/gpupolicy}
ROOT=$CACHE/peers

here=$(cd "$(dirname "$0")" && pwd)
NAME=build-fleet-peers
# shellcheck source=lib.sh
source "$here/lib.sh"

build_registry() {
  local out=$ROOT/registry-$REGISTRY_VERSION
  [ -x "$out/registry" ] && return
  log "building the distribution registry $REGISTRY_VERSION (cold: a few minutes)"
  mkdir -p "$out"
  local work
  work=$(workcopy "registry-$REGISTRY_VERSION" github.com/distribution/distribution/v3 "$REGISTRY_VERSION")
  ( cd "$work" && GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$out/registry.tmp" ./cmd/registry >&2 )
  mv "$out/registry.tmp" "$out/registry"
  rm -rf "$work"
}

build_source_controller() {
  local out=$ROOT/source-controller-$SOURCE_VERSION
  [ -x "$out/source-controller" ] && [ -d "$out/crds" ] && return
  log "building source-controller $SOURCE_VERSION (cold: several minutes)"
  local work
  work=$(workcopy "source-controller-$SOURCE_VERSION" github.com/fluxcd/source-controller "$SOURCE_VERSION")
  # The module zip lacks ./api; use the published api module of the same version instead.
  ( cd "$work"
    go mod edit -dropreplace github.com/fluxcd/source-controller/api
    # fluxcd/pkg/artifact v0.18.3, which v1.9.6 requires, is not served by the module proxy;
    # v0.18.0 of the same minor is (a patch apart: the same API).
    go mod edit -replace github.com/fluxcd/pkg/artifact=github.com/fluxcd/pkg/artifact@v0.18.0
    GOFLAGS=-mod=mod go get "github.com/fluxcd/source-controller/api@$SOURCE_VERSION" >&2
    GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$work/source-controller.tmp" . >&2 )
  mkdir -p "$out/crds"
  mv "$work/source-controller.tmp" "$out/source-controller"
  cp "$work/config/crd/bases/"*.yaml "$out/crds/"
  rm -rf "$work"
}

build_appset() {
  local out=$ROOT/argocd-applicationset-controller-$ARGOCD_VERSION
  [ -x "$out/argocd-applicationset-controller" ] && [ -d "$out/crds" ] && return
  log "building Argo CD $ARGOCD_VERSION's ApplicationSet controller with $PEER_TOOLCHAIN (cold: about ten minutes)"
  local work
  work=$(GOTOOLCHAIN=$PEER_TOOLCHAIN workcopy "argo-cd-$ARGOCD_VERSION" github.com/argoproj/argo-cd/v3 "$ARGOCD_VERSION")
  ( cd "$work"
    export GOTOOLCHAIN=$PEER_TOOLCHAIN
    # The zip lacks the nested gitops-engine module; the published one of the same release
    # stands in for the replace that points at it.
    go mod edit -dropreplace github.com/argoproj/argo-cd/gitops-engine/v3
    # argocd dispatches on its own name to every Argo CD program; this main builds only the
    # ApplicationSet controller's command (the same package the argocd binary runs).
    mkdir -p cmd/gpupolicy-appset
    cat > cmd/gpupolicy-appset/main.go <<'EOF'
package main

import (
	"os"

	command "github.com/argoproj/argo-cd/v3/cmd/argocd-applicationset-controller/commands"
)

func main() {
	if err := command.NewCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
EOF
    GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$work/appset.tmp" ./cmd/gpupolicy-appset >&2 )
  mkdir -p "$out/crds"
  mv "$work/appset.tmp" "$out/argocd-applicationset-controller"
  cp "$work/manifests/crds/"{application,applicationset,appproject}-crd.yaml "$out/crds/"
  rm -rf "$work"
}

want=${*:-registry source-controller appset}
for p in $want; do
  case $p in
  registry) timed registry build_registry ;;
  source-controller) timed source-controller build_source_controller ;;
  appset) timed appset build_appset ;;
  *) log "unknown peer $p: registry, source-controller or appset"; exit 2 ;;
  esac
done
echo "$ROOT"
