#!/usr/bin/env bash
# Builds NVIDIA's container toolkit programs that fn/render's toolkit test runs, from the module
# proxy, into $CACHE/peers/nvidia-toolkit-$VERSION (first run only; keyed by version and by the
# harness's own source):
#   - nvidia-ctk-installer: the program of NVIDIA's toolkit image, which the rendered toolkit-copy
#     init container runs; the test runs it with the rendered environment;
#   - nvidia-container-runtime, nvidia-container-runtime-hook, nvidia-cdi-hook: the real files it
#     installs (nvidia-container-cli and libnvidia-container are C; the test stands in for them);
#   - toolkit-config (main.go beside this script): NVIDIA's config loader over a config.toml.
# nvidia-ctk itself is the Makefile's nvidia-ctk target. Prints the directory.
set -euo pipefail

VERSION=${NVIDIA_CTK_VERSION:-v1.20.2}
CACHE=${GPUPOLICY_CACHE:-$HOME/.cache/gpupolicy}
here=$(cd "$(dirname "$0")" && pwd)
out=$CACHE/peers/nvidia-toolkit-$VERSION
mod=github.com/NVIDIA/nvidia-container-toolkit

log() { echo "[toolkit-peers] $*" >&2; }

if [ ! -x "$out/nvidia-ctk-installer" ] || [ ! -x "$out/nvidia-cdi-hook" ]; then
  log "building nvidia-ctk-installer, nvidia-container-runtime(-hook), nvidia-cdi-hook $VERSION (first run only, a minute or two)"
  mkdir -p "$out"
  GOBIN=$out GOFLAGS= go install "$mod/cmd/nvidia-ctk-installer@$VERSION" "$mod/cmd/nvidia-container-runtime@$VERSION" \
    "$mod/cmd/nvidia-container-runtime-hook@$VERSION" "$mod/cmd/nvidia-cdi-hook@$VERSION"
fi

sum=$(cat "$here/main.go" | sha256sum | cut -c1-12)
if [ ! -x "$out/toolkit-config-$sum" ]; then
  log "building toolkit-config over $mod $VERSION"
  work=$CACHE/src/toolkit-config-$VERSION
  rm -rf "$work"; mkdir -p "$work"
  cp "$here/main.go" "$work/main.go"
  ( cd "$work"
    printf 'module gpupolicy.local/toolkitconfig\n\ngo 1.24\n' > go.mod
    GOFLAGS=-mod=mod go get "$mod@$VERSION" >&2
    GOFLAGS=-mod=mod go mod tidy >&2
    go build -tags toolkitpeer -o "$out/toolkit-config-$sum.tmp" . >&2 )
  mv "$out/toolkit-config-$sum.tmp" "$out/toolkit-config-$sum"
fi
ln -sf "toolkit-config-$sum" "$out/toolkit-config"
echo "$out"
