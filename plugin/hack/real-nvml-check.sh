#!/bin/bash
# One check of the node programs against a real GPU's NVML: the device plugin (built binary,
# test kubelet, real gRPC), the feature labels, an exporter scrape next to `nvidia-smi -q`, and
# the agent's driver check (branch and exact). Everything it records goes under $OUT.
#
# Prepare on a build machine (binaries are copied to the GPU machine, which has no Go):
#   for b in gpu-device-plugin gpu-exporter gpu-node-agent; do go build -ldflags "-s -w" -o $D/$b ./plugin/cmd/$b; done
#   go test -c -o $D/deviceplugin.test ./plugin/deviceplugin; go test -c -o $D/labels.test ./plugin/agent/labels
#   gpupolicy-fn render -f POLICY -o tree  # and copy tree/00-prereqs/configmap-gpu-node-agent.yaml's config.yaml to $D/agent.yaml
exec > >(tee "$OUT/run.log") 2>&1
set -x
D=${GPUPOLICY_DEVICE_BIN:-/tmp/gp}  # stripped binaries + test binaries (see the header)
uname -a; cat /etc/os-release | head -2; ldd $D/gpu-exporter | head -5
cat /proc/driver/nvidia/version
nvidia-smi -q > "$OUT/nvidia-smi-q.txt" 2>&1; nvidia-smi
GPUPOLICY_REAL_NVML=1 GPU_DEVICE_PLUGIN_BIN=$D/gpu-device-plugin GPUPOLICY_REAL_NVML_OUT=$OUT/device-plugin.json timeout 120 $D/deviceplugin.test -test.run TestRealNVML -test.v 2>&1 | tail -60
GPUPOLICY_REAL_NVML=1 timeout 60 $D/labels.test -test.run TestRealNVML -test.v
$D/gpu-exporter --listen 127.0.0.1:9400 --pod-resources-socket= --interval 1s --hostname h200 2> "$OUT/exporter.log" &
EXP=$!; sleep 6
python3 -c "import urllib.request,sys;open(sys.argv[1],'wb').write(urllib.request.urlopen('http://127.0.0.1:9400/metrics').read())" "$OUT/metrics.txt"
for i in $(seq 20); do python3 -c "import urllib.request,time;t=time.perf_counter();urllib.request.urlopen('http://127.0.0.1:9400/metrics').read();print('%.2fms'%((time.perf_counter()-t)*1000))"; done | tr '\n' ' '; echo
# Where the exporter's memory goes (issue 18): totals, then resident KiB by mapping (the binary,
# libnvidia-ml, libcuda, libc, [heap], anonymous), after 20 scrapes; then the same with the mock
# NVML, whose difference in RssAnon is the real library's own allocation.
mem() {
  grep -E '^(VmHWM|VmRSS|RssAnon|RssFile|RssShmem)' /proc/$1/status | tr -s ' \t' ' ' | tr '\n' ';'; echo
  awk '/^[0-9a-f]+-[0-9a-f]+ / {name=($6==""?"[anon]":$6)} /^Rss:/ {rss[name]+=$2} END {for (n in rss) if (rss[n] >= 256) printf "  %7d KiB %s\n", rss[n], n}' /proc/$1/smaps | sort -rn | head -12
}
mem $EXP | tee "$OUT/exporter-memory.txt"
grep -vc '^#' "$OUT/metrics.txt"
grep -E '^(DCGM_FI_DEV_GPU_TEMP|DCGM_FI_DEV_POWER_USAGE|DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_SM_CLOCK|DCGM_FI_DEV_GPU_UTIL|gpupolicy_gpu_up|gpupolicy_node_driver_info|DCGM_FI_DEV_TOTAL_ENERGY)' "$OUT/metrics.txt" | cut -c1-400
kill $EXP
$D/gpu-exporter --nvml-mock dgxa100 --listen 127.0.0.1:9401 --pod-resources-socket= --interval 1s --hostname mock 2> "$OUT/exporter-mock.log" &
MOCK=$!; sleep 6
for i in $(seq 20); do python3 -c "import urllib.request;urllib.request.urlopen('http://127.0.0.1:9401/metrics').read()"; done
mem $MOCK | tee "$OUT/exporter-mock-memory.txt"
kill $MOCK
timeout 60 $D/gpu-node-agent driver --config $D/agent.yaml --host-root / ; echo "driver check rc=$?"
sed 's/enforce: branch/enforce: exact/' $D/agent.yaml > $D/exact.yaml
timeout 60 $D/gpu-node-agent driver --config $D/exact.yaml --host-root / ; echo "driver check exact rc=$?"
