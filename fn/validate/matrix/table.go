// Code generated from matrix.yaml by TestTableIsMatrixYAML (go test ./fn/validate/matrix -update); DO NOT EDIT.

package matrix

var table = Matrix{
	CUDA: []CUDA{
		{
			Major:     11,
			MinDriver: "450.80.02",
			Source:    "https://docs.nvidia.com/deploy/cuda-compatibility/ (Table: CUDA Toolkit and Minimum Required Driver Version, minor version compatibility)",
		},
		{
			Major:     12,
			MinDriver: "525.60.13",
			Source:    "https://docs.nvidia.com/deploy/cuda-compatibility/ (Table: CUDA Toolkit and Minimum Required Driver Version, minor version compatibility)",
		},
		{
			Major:     13,
			MinDriver: "580.65.06",
			Source:    "https://docs.nvidia.com/deploy/cuda-compatibility/ (Table: CUDA Toolkit and Minimum Required Driver Version, minor version compatibility)",
		},
	},
	DriverBranches: []DriverBranch{
		{
			Branch: 535,
			Type:   "LTSB",
			EOL:    "2026-06",
			Source: "https://docs.nvidia.com/datacenter/tesla/drivers/supported-drivers-and-cuda-toolkit-versions.html (R535 LTSB, EOL June 2026)",
		},
		{
			Branch: 570,
			Type:   "PB",
			EOL:    "2026-02",
			Source: "https://docs.nvidia.com/datacenter/tesla/drivers/supported-drivers-and-cuda-toolkit-versions.html (R570 production branch, EOL February 2026)",
		},
		{
			Branch: 580,
			Type:   "LTSB",
			EOL:    "2028-08",
			Source: "https://docs.nvidia.com/datacenter/tesla/drivers/supported-drivers-and-cuda-toolkit-versions.html (R580 LTSB, EOL August 2028)",
		},
	},
	Containerd: []Containerd{
		{
			Minor:         "1.6",
			ConfigVersion: 2,
			Source:        "https://github.com/containerd/containerd/blob/release/1.6/docs/cri/config.md (config version 2; imports replace top-level tables; no enable_cdi before 1.7)",
		},
		{
			Minor:         "1.7",
			ConfigVersion: 2,
			CDI:           true,
			Source:        "https://github.com/containerd/containerd/blob/release/1.7/docs/cri/config.md (config version 2; enable_cdi added in 1.7.0)",
		},
		{
			Minor:         "2.0",
			ConfigVersion: 3,
			CDI:           true,
			Source:        "https://github.com/containerd/containerd/blob/release/2.0/docs/PLUGINS.md and RELEASES.md (config version 3 from 2.0; CDI on by default)",
		},
		{
			Minor:                    "2.1",
			ConfigVersion:            3,
			ImportsMergePluginTables: true,
			CDI:                      true,
			Source:                   "https://github.com/containerd/containerd/pull/11090 (2.1: imported files merge plugin tables instead of replacing them)",
		},
		{
			Minor:                    "2.2",
			ConfigVersion:            3,
			ImportsMergePluginTables: true,
			CDI:                      true,
			Source:                   "https://github.com/containerd/containerd/releases/tag/v2.2.0 and RELEASES.md (2.2, November 2025: config version 3 unchanged, imports keep merging plugin tables)",
		},
	},
	Toolkit: []ToolkitFeature{
		{
			Feature:    "cdi",
			MinVersion: "1.12.0",
			Source:     "https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/cdi-support.html and release notes v1.12.0 (nvidia-ctk cdi generate, runtime cdi mode)",
		},
		{
			Feature:    "containerd-config-v3",
			MinVersion: "1.17.4",
			Source:     "https://github.com/NVIDIA/nvidia-container-toolkit/releases/tag/v1.17.4 (support for containerd config version 3)",
		},
		{
			Feature:    "containerd-drop-in",
			MinVersion: "1.18.0",
			Source:     "https://github.com/NVIDIA/nvidia-container-toolkit/releases/tag/v1.18.0 (runtime configure writes a drop-in file instead of editing config.toml)",
		},
	},
	Kubernetes: Kubernetes{
		Minimum:            "1.29",
		MinimumSource:      "https://kubernetes.io/docs/reference/command-line-tools-reference/feature-gates/ (DevicePluginCDIDevices beta, on by default from 1.29: the cdi-cri device list strategy)",
		NewestTested:       "1.37",
		NewestTestedSource: "e2e/ of this repository (control plane built from k8s.io/kubernetes v1.37.2)",
		Features: []KubernetesFeature{
			{
				Name:        "ValidatingAdmissionPolicy",
				UsedBy:      "guardrails",
				OnByDefault: "1.30",
				GA:          "1.30",
				Source:      "https://kubernetes.io/blog/2024/04/24/validating-admission-policy-ga/ (admissionregistration.k8s.io/v1 GA in 1.30)",
			},
			{
				Name:        "ServiceAccountTokenPodNodeInfo",
				UsedBy:      "guardrails",
				OnByDefault: "1.30",
				GA:          "1.32",
				Source:      "https://kubernetes.io/docs/reference/command-line-tools-reference/feature-gates/ (node-name claim in service account tokens: beta on by default 1.30, GA 1.32)",
			},
			{
				Name:        "DevicePluginCDIDevices",
				UsedBy:      "cdi-cri",
				OnByDefault: "1.29",
				GA:          "1.31",
				Source:      "https://kubernetes.io/docs/reference/command-line-tools-reference/feature-gates/ (CDI device names in device plugin responses: beta on by default 1.29, GA 1.31)",
			},
			{
				Name:        "DynamicResourceAllocation",
				UsedBy:      "dra",
				OnByDefault: "1.34",
				GA:          "1.34",
				Source:      "https://kubernetes.io/blog/2025/09/01/kubernetes-v1-34-dra-updates/ (resource.k8s.io/v1 DeviceClass, ResourceClaim and ResourceSlice GA and on by default in 1.34)",
			},
		},
	},
}
