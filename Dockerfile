# syntax=docker/dockerfile:1
# One image with every binary of the module at /usr/local/bin: the KRM function / CLI
# (gpupolicy-fn, the entrypoint) and the node programs the rendered DaemonSets run
# (gpu-node-agent, gpu-device-plugin, gpu-exporter).
#
#   docker build -t ghcr.io/gpupolicy/gpupolicy:v0.1.0 --build-arg VERSION=v0.1.0 .
#
# The tag must match what `gpupolicy-fn` renders for spec.images.gpupolicy (version/), so pass
# the same VERSION the function was built with. Without a Docker engine, `make image` builds this
# file with buildah (e2e/hack/build-image.sh): it asks bin/gpupolicy-fn for the tag and VERSION
# and writes bin/gpupolicy-image.tar (docker-archive, for `ctr -n k8s.io image import`).
#
# Both bases are build arguments, so a machine without registry access can point them at local
# stand-ins (build-image.sh builds them from Debian with debootstrap): GO_IMAGE needs Go (GOROOT
# on PATH, GOTOOLCHAIN=local), gcc and libc6-dev, CA certificates; BASE_IMAGE needs glibc and
# libdl for the cgo binaries, user/group 65532, CA certificates, /tmp.
#
# Who runs as root, and why (the image's default user is 65532, "nonroot"):
#   gpu-container-toolkit (install)  root + privileged + hostPID: writes containerd's drop-in under
#                                    /etc/containerd on the host and restarts containerd (it runs the
#                                    host's own containerd/systemctl through chroot /host, so the
#                                    image needs no shell or tools).
#   gpu-device-plugin                root, unprivileged, no capabilities: creates its socket in the
#                                    root-owned /var/lib/kubelet/device-plugins and dials kubelet.sock.
#   gpu-exporter                     root, unprivileged, no capabilities: dials the root-owned
#                                    kubelet pod-resources socket for pod attribution.
#   gpu-node-agent gate/driver/labels, gpupolicy-fn   non-root (65532): they read world-readable
#                                    host files and talk to the API server only.
# NVIDIA's driver container (driver.source=container) is NVIDIA's image, not this one.

ARG GO_IMAGE=golang:1.26-bookworm
ARG BASE_IMAGE=gcr.io/distroless/base-debian12:nonroot

FROM ${GO_IMAGE} AS build
WORKDIR /src
# The node programs use go-nvml, which is cgo (it dlopens libnvidia-ml.so.1 at run time, so no
# NVIDIA library is needed to build); its headers declare deprecated calls, which only produce
# warnings. gpupolicy-fn needs no NVML and is built static (CGO_ENABLED=0), so it can be copied
# into other images: Argo CD's repo server, CI runners (examples/argocd).
ENV CGO_ENABLED=1 \
    CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" \
    GOFLAGS=-trimpath
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY fn/ fn/
COPY plugin/ plugin/
COPY version/ version/
ARG VERSION=v0.1.0
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    set -eu; mkdir -p /out; \
    ldflags="-s -w -X github.com/gpupolicy/gpupolicy/version.Version=${VERSION}"; \
    CGO_ENABLED=0 go build -ldflags "$ldflags" -o /out/gpupolicy-fn ./fn; \
    for b in gpu-device-plugin gpu-exporter gpu-node-agent; do \
      go build -ldflags "$ldflags" -o "/out/$b" "./plugin/cmd/$b"; \
    done

# distroless/base (or build-image.sh's stand-in with the same contents): glibc and libdl for the
# cgo binaries and NVML's dlopen, CA certificates, no shell or package manager. The nvidia
# runtime class injects libnvidia-ml.so.1 at run time.
FROM ${BASE_IMAGE}
ARG VERSION=v0.1.0
LABEL org.opencontainers.image.title="gpupolicy" \
      org.opencontainers.image.description="gpupolicy: KRM function and GPU node programs (device plugin, exporter, node agent)" \
      org.opencontainers.image.source="https://github.com/gpupolicy/gpupolicy" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
# Without arguments the function reads a ResourceList on stdin: the image doubles as a
# containerized KRM function (kustomize `container:` functions, kpt fn render).
ENTRYPOINT ["/usr/local/bin/gpupolicy-fn"]
