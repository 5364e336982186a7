package realnode

// initScript is PID 1 of the node's PID and mount namespaces (unshare --mount --pid --fork
// --mount-proc). It binds the node's directories over the real paths, then supervises
// containerd and the kubelet as systemd would: each is started again whenever it exits, and
// every start is appended to <dir>/<name>.starts as "<pid in the node's namespace> <unix time>".
// When PID 1 dies the kernel kills everything in the namespace (containers and shims too),
// and the mounts go with the namespace, so the host keeps none of it.
//
// Arguments: the node directory, then "containerd" or "" for the 2.1 binaries' directory.
const initScript = `#!/bin/bash
set -u
D=$1
BIN21=${2:-}
R=$D/rootfs
fail() { echo "node init: $*" >&2; exit 1; }

# The kubelet's mount propagation (HostToContainer volumes) needs a shared root; unshare made
# every mount private first, so nothing propagates back to the host.
mount --make-rshared / || fail "make / rshared"
while read -r p; do
  [ -n "$p" ] || continue
  mount --bind "$R$p" "$p" || fail "bind $R$p at $p"
done < "$D/binds"
if [ -n "$BIN21" ]; then
  # A containerd 2.1 node: its binaries where the node's tools (the toolkit installer's
  # 'containerd config dump', ctr) look for them.
  for b in containerd containerd-shim-runc-v2 ctr; do
    mount --bind "$BIN21/$b" "/usr/bin/$b" || fail "bind $BIN21/$b"
  done
fi

supervise() {
  local name=$1; shift
  local n=0
  while [ ! -e "$D/stopping" ]; do
    n=$((n + 1))
    echo "### start $n $(date -u +%FT%T.%N)" >> "$D/logs/$name.log"
    "$@" >> "$D/logs/$name.log" 2>&1 &
    local pid=$!
    echo "$pid $(date +%s.%N)" >> "$D/$name.starts"
    wait "$pid"
    echo "### exit $n status $? $(date -u +%FT%T.%N)" >> "$D/logs/$name.log"
    sleep 0.1
  done
}

supervise containerd /usr/bin/containerd --config /etc/containerd/config.toml &
for _ in $(seq 1 600); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.05; done
[ -S /run/containerd/containerd.sock ] || fail "containerd did not create /run/containerd/containerd.sock"
touch "$D/containerd-ready"
# The kubelet waits until the test imported the images (no registry here).
while [ ! -e "$D/start-kubelet" ]; do sleep 0.05; done
# shellcheck disable=SC2046 # one argument per line, none with spaces
supervise kubelet $(cat "$D/kubelet.args") &
while :; do wait; sleep 1; done
`
