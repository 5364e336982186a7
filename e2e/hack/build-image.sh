#!/usr/bin/env bash
# Builds the project's image from the root Dockerfile without a Docker engine or a registry
# (`make image`): buildah with the vfs storage driver and chroot isolation, in its own storage
# under $GPUPOLICY_CACHE/buildah, and local stand-ins for the Dockerfile's two bases:
#   GO_IMAGE    Debian (debootstrap minbase + gcc, libc6-dev, ca-certificates, git) with this
#               machine's Go at /usr/local/go and CA bundle, and the golang image's environment;
#   BASE_IMAGE  distroless/base-like: that rootfs's glibc, CA certificates, nsswitch.conf, users
#               root/nobody/nonroot (65532), /tmp; no shell, no package manager.
# Both are built once and cached, keyed by Debian suite, Go version and RECIPE (bump it when the
# recipes below change); the debootstrapped rootfs is kept under $GPUPOLICY_CACHE/images.
#
# Writes bin/gpupolicy-image.tar, a docker-archive for `ctr -n k8s.io image import`, tagged as
# bin/gpupolicy-fn renders spec.images.gpupolicy by default and built with its version, so the
# rendered DaemonSets run this image. The tar is replaced atomically; a failed build leaves none.
# Prints the tag on its last line. Needs root (debootstrap, chroot), buildah, debootstrap, go.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${GPUPOLICY_CACHE:-$HOME/.cache/gpupolicy}
SUITE=${IMAGE_DEBIAN_SUITE:-bookworm}
MIRROR=${IMAGE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
RECIPE=r1
FN=$root/bin/gpupolicy-fn
OUT=$root/bin/gpupolicy-image.tar
IMAGES=$CACHE/images
STORE=$CACHE/buildah

log() { echo "[build-image] $*" >&2; }
die() { echo "build-image: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap and buildah's chroot isolation); run it as root"
for t in buildah debootstrap go tar flock ldconfig; do
  command -v "$t" >/dev/null || die "$t not found: run 'make host-deps' (as root)"
done
[ -x "$FN" ] || die "$FN missing: run 'make build' first (it decides the image's tag and version)"

# A stale tar must not outlive a failed build: the tests and the real-node suite import it.
rm -f "$OUT"
mkdir -p "$IMAGES" "$STORE/tmp" "$(dirname "$OUT")"
# One build at a time per cache: debootstrap and the storage would race otherwise.
exec 9>"$IMAGES/.lock"
flock 9

# buildah keeps RUN --mount=type=cache directories (the Go module and build caches that make warm
# builds fast) and its temporary image copies under TMPDIR: keep them with the storage.
export TMPDIR=$STORE/tmp
bh() { buildah --root "$STORE/storage" --runroot "$STORE/run" --storage-driver vfs "$@"; }

# The tag is what the function renders by default (spec.images.gpupolicy unset), read from the
# rendered gpu-node-agent DaemonSet of a minimal policy: asked of the binary, not assumed.
rendered_default_image() {
  local d; d=$(mktemp -d)
  cat > "$d/policy.yaml" <<'POLICY'
apiVersion: gpupolicy.dev/v1alpha1
kind: GPUPolicy
metadata:
  name: image-tag
spec:
  kubernetesVersion: "1.34"
  driver:
    version: "580.95.05"
  cuda:
    version: "12.8"
POLICY
  "$FN" render -f "$d/policy.yaml" -o "$d/out" >/dev/null || { rm -rf "$d"; die "$FN render of a minimal policy failed"; }
  local ds images
  ds=$(find "$d/out" -name daemonset-gpu-node-agent.yaml)
  [ -n "$ds" ] || { rm -rf "$d"; die "$FN rendered no gpu-node-agent DaemonSet for a minimal policy"; }
  images=$(sed -n 's/^ *image: *//p' "$ds" | sort -u)
  rm -rf "$d"
  [ -n "$images" ] && [ "$(wc -l <<<"$images")" = 1 ] || die "expected one image in the rendered gpu-node-agent DaemonSet, got: ${images:-none}"
  echo "$images"
}

version=$("$FN" version)
tag=$(rendered_default_image)
[ "${tag##*:}" = "$version" ] || die "$FN renders $tag but reports version $version: rebuild it with 'make build'"

go_version=$(go env GOVERSION)
goroot=$(go env GOROOT)
rootfs=$IMAGES/rootfs-$SUITE-$RECIPE
go_image=localhost/gpupolicy/golang:${go_version#go}-$SUITE-$RECIPE
base_image=localhost/gpupolicy/base:$SUITE-$RECIPE

timed() {
  local name=$1 start=$SECONDS; shift
  "$@"
  log "$name ready in $((SECONDS - start))s"
}

ensure_rootfs() {
  [ -f "$rootfs/.complete" ] && return
  log "debootstrap $SUITE into $rootfs (cold: about a minute)"
  rm -rf "$rootfs.tmp"
  debootstrap --variant=minbase --include=gcc,libc6-dev,ca-certificates,git \
    "$SUITE" "$rootfs.tmp" "$MIRROR" >"$IMAGES/debootstrap-$SUITE.log" 2>&1 ||
    die "debootstrap failed; see $IMAGES/debootstrap-$SUITE.log"
  touch "$rootfs.tmp/.complete"
  rm -rf "$rootfs"
  mv "$rootfs.tmp" "$rootfs"
}

have_image() { bh inspect --type image "$1" >/dev/null 2>&1; }

# commit_dir NAME DIR CONFIG...: a one-layer image of DIR (ownership kept), configured with
# the `buildah config` flags CONFIG.
commit_dir() {
  local name=$1 dir=$2 c mnt; shift 2
  c=$(bh from --pull=never scratch)
  mnt=$(bh mount "$c")
  tar -C "$dir" --numeric-owner -cf - . | tar -C "$mnt" --numeric-owner -xpf -
  bh umount "$c" >/dev/null
  bh config "$@" "$c"
  bh commit --quiet --rm "$c" "$name" >/dev/null
}

build_go_image() {
  have_image "$go_image" && return
  log "building $go_image (rootfs + $goroot)"
  local dir=$STORE/tmp/go-image
  rm -rf "$dir"; mkdir -p "$dir"
  tar -C "$rootfs" --numeric-owner \
    --exclude=./.complete --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
    --exclude='./run/*' --exclude='./var/cache/apt/archives/*.deb' --exclude='./var/lib/apt/lists/*' \
    -cf - . | tar -C "$dir" --numeric-owner -xpf -
  mkdir -p "$dir/usr/local/go" "$dir/go/bin" "$dir/go/src"
  cp -a "$goroot/." "$dir/usr/local/go/"
  # The build stage fetches modules through this machine's network, so it trusts what the
  # machine trusts (a local CA of an egress proxy, say); the final image keeps Debian's bundle.
  cp -L /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/ca-certificates.crt"
  chmod -R 1777 "$dir/go"
  # The environment of the official golang image.
  commit_dir "$go_image" "$dir" \
    --env PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env GOLANG_VERSION="${go_version#go}" --env GOPATH=/go --env GOTOOLCHAIN=local \
    --workingdir /go --cmd bash
  rm -rf "$dir"
}

# What distroless/base-debian12:nonroot holds that the binaries and NVML's dlopen need: every
# shared library of the rootfs's libc6 (libc, ld-linux, libdl, libpthread, libm, librt,
# libresolv, libnss_*), with the same glibc as the build stage, plus an ld.so cache so the
# libraries the nvidia runtime injects are found.
build_base_image() {
  have_image "$base_image" && return
  log "building $base_image (glibc, CA certificates, users from $rootfs)"
  local dir=$STORE/tmp/base-image list p d
  rm -rf "$dir"; mkdir -p "$dir/etc/ssl/certs" "$dir/usr/bin" "$dir/usr/sbin" "$dir/usr/local/bin"
  for p in bin sbin lib lib32 lib64 libx32; do
    if [ -L "$rootfs/$p" ]; then cp -a "$rootfs/$p" "$dir/$p"; fi
  done
  list=
  for p in "$rootfs"/var/lib/dpkg/info/libc6:*.list "$rootfs"/var/lib/dpkg/info/libc6.list; do
    [ -f "$p" ] && list=$p && break
  done
  [ -n "$list" ] || die "no libc6 file list in $rootfs; remove that directory to debootstrap again"
  while read -r p; do
    case $p in */gconv/*) continue ;; esac
    [[ $p =~ \.so(\.[0-9]+)*$ ]] || continue
    [ -e "$rootfs$p" ] || [ -L "$rootfs$p" ] || continue
    # Resolve the directory only (merged /usr: lib -> usr/lib); a library that is a link stays one.
    d=$(realpath --relative-to="$rootfs" "$rootfs$(dirname "$p")")
    mkdir -p "$dir/$d"
    cp -a "$rootfs/$d/$(basename "$p")" "$dir/$d/"
  done <"$list"
  # (find, not test -e: the loader's link is absolute and would resolve on this host)
  for p in 'libc.so.6' 'ld-linux*.so.*'; do
    [ -n "$(find "$dir" -name "$p" -type f)" ] || die "$p missing from $base_image (libc6 list $list)"
  done
  cp -a "$rootfs/etc/ld.so.conf" "$rootfs/etc/ld.so.conf.d" "$dir/etc/"
  ldconfig -r "$dir"
  cp -L "$rootfs/etc/ssl/certs/ca-certificates.crt" "$dir/etc/ssl/certs/"
  cp -a "$rootfs/etc/nsswitch.conf" "$rootfs/etc/os-release" "$dir/etc/"
  mkdir -p "$dir/usr/lib" && cp -a "$rootfs/usr/lib/os-release" "$dir/usr/lib/"
  cat >"$dir/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
PASSWD
  cat >"$dir/etc/group" <<'GROUP'
root:x:0:
tty:x:5:
staff:x:50:
nobody:x:65534:
nonroot:x:65532:
GROUP
  install -d -m 1777 "$dir/tmp"
  install -d -m 0700 "$dir/root"
  install -d -m 0700 -o 65532 -g 65532 "$dir/home/nonroot"
  commit_dir "$base_image" "$dir" \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    --user 65532 --workingdir /home/nonroot
  rm -rf "$dir"
}

timed "rootfs $SUITE" ensure_rootfs
timed "$go_image" build_go_image
timed "$base_image" build_base_image

tmp=$OUT.tmp.$$
trap 'rm -f "$tmp"' EXIT
start=$SECONDS
log "building $tag (VERSION=$version) from $root/Dockerfile"
# Working containers a failed or killed build left behind (the storage is ours, and locked).
bh rm --all >/dev/null
bh bud --isolation chroot --pull=never \
  --build-arg GO_IMAGE="$go_image" --build-arg BASE_IMAGE="$base_image" \
  --build-arg VERSION="$version" \
  -t "$tag" -f "$root/Dockerfile" "$root" >&2
bh push --quiet "$tag" "docker-archive:$tmp:$tag" >&2
# The archive is the product; the store keeps only the cached bases.
bh rmi "$tag" >/dev/null
mv "$tmp" "$OUT"
log "$OUT ($tag, $(du -m "$OUT" | cut -f1) MB) in $((SECONDS - start))s"
echo "$tag"
