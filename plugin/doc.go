// Package plugin holds the node programs and their contract with the function; it has no code
// of its own. Its packages in the order data flows on a node:
//
//   - config: the contract, the documents the function renders for the node programs (agent
//     config, containerd drop-in, device-plugin config) and the stage table (Gates) both
//     sides read;
//   - agent/gate and agent/stages: the node agent's checks, one per stage-table row with a
//     check, opening the gate labels that admit the next stage's DaemonSets;
//   - agent/driver, agent/toolkit, agent/migmanager, agent/labels, agent/discover: what the
//     stages do on the node (driver check, drop-in and CDI spec, MIG layout, feature labels,
//     GPU discovery);
//   - deviceplugin, draplugin: GPUs to pods, through the kubelet's device plugin or DRA API;
//   - exporter: GPU metrics;
//   - nodefacts: one reading of the driver and the GPUs from NVML, which the labels, the
//     exporter's identity and the driver validator share; nodefacts/hostfacts: the kernel
//     module's version and the toolkit record, read from host files by the unprivileged gate;
//   - gpulib (and gpulib/gpumock): the one seam over NVML, and the mock behind --nvml-mock;
//   - agent/cli, deviceplugin/cli, exporter/cli and cmd/*: the command lines and thin mains.
package plugin
