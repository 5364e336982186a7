#!/usr/bin/env bash
# Builds containerd 2.x (containerd, containerd-shim-runc-v2, ctr) from the Go module proxy,
# cached outside the repo keyed by version: Debian 12 ships only containerd 1.6, and config
# version 3 must run in a real daemon (the toolkit tests, the real-node e2e suite).
# Prints the bin directory on its last line.
set -euo pipefail

CONTAINERD2_VERSION=${CONTAINERD2_VERSION:-v2.1.9}
CACHE=${GPUPOLICY_CACHE:-$HOME/.cache/gpupolicy}
BIN=$CACHE/node-bin/containerd-$CONTAINERD2_VERSION
cmds=(containerd containerd-shim-runc-v2 ctr)

missing=0
for c in "${cmds[@]}"; do [ -x "$BIN/$c" ] || missing=1; done
if [ $missing = 1 ]; then
  start=$SECONDS
  echo "[build-containerd] building containerd $CONTAINERD2_VERSION (cold: a few minutes)" >&2
  work=$CACHE/src/containerd-$CONTAINERD2_VERSION
  mkdir -p "$work" "$BIN"
  cd "$work"
  [ -f go.mod ] || printf 'module gpupolicy.dev/e2e/containerdbuild\n\ngo 1.25\n' > go.mod
  export GOFLAGS=-mod=mod
  go get "github.com/containerd/containerd/v2@$CONTAINERD2_VERSION" >&2
  for c in "${cmds[@]}"; do
    [ -x "$BIN/$c" ] && continue
    # The shim must be static: containerd starts it with a minimal environment.
    CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD2_VERSION" \
      -o "$BIN/$c.tmp" "github.com/containerd/containerd/v2/cmd/$c" >&2
    mv "$BIN/$c.tmp" "$BIN/$c"
  done
  echo "[build-containerd] containerd $CONTAINERD2_VERSION ready in $((SECONDS - start))s" >&2
fi
echo "$BIN"
