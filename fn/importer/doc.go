// Package importer turns a GPU Operator configuration into a GPUPolicy a person can review:
// ClusterPolicy (nvidia.com/v1) and NVIDIADriver (nvidia.com/v1alpha1) objects, decoded with
// NVIDIA's own Go types so that every field they define is known, plus the cluster's Nodes
// (the driver, CUDA, containerd and Kubernetes versions the operator found on them, from
// gpu-feature-discovery's and Node Feature Discovery's labels) and the device plugin's
// ConfigMap. Every field the input sets is either mapped (the output's comments say from
// where) or reported with its path and why gpupolicy has no equivalent: nothing is dropped
// silently. The chart's Helm values go through the chart's own template first (values.go).
//
// The flow: Read (files → Input) → Import (Input → Result: the policy, its comments, the
// report) → Result.WriteYAML.
package importer
