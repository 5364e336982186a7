package validate_test

import (
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// TestPoolSelectionContradictions: each case's pool says one thing with its settings and
// selects nodes that contradict it; its twin (fixed) must not draw that error.
func TestPoolSelectionContradictions(t *testing.T) {
	const a100 = `{all-1g: [{devices: all, profiles: {"1g.10gb": 7}}]}`
	pool := func(body string) string {
		return base + "  nodePools:\n  - name: a\n" + body
	}
	for name, tc := range map[string]struct {
		doc, fixed string
		field, msg string
	}{
		"MIG on a model without MIG": {
			doc:   pool("    nodeSelector: {nvidia.com/gpu.product: Tesla-T4}\n    devicePlugin: {migStrategy: mixed}\n    mig: {layouts: " + a100 + "}\n"),
			fixed: pool("    nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}\n    devicePlugin: {migStrategy: mixed}\n    mig: {layouts: " + a100 + "}\n"),
			field: "spec.nodePools[0].nodeSelector[nvidia.com/gpu.product]", msg: "turing GPUs (nvidia.com/gpu.product=Tesla-T4), which have no MIG",
		},
		"MIG on an Ampere model without MIG": {
			doc:   pool("    nodeSelector: {nvidia.com/gpu.product: NVIDIA-A10G}\n    devicePlugin: {migStrategy: mixed}\n    mig: {layouts: " + a100 + "}\n"),
			fixed: pool("    nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-80GB-PCIe}\n    devicePlugin: {migStrategy: mixed}\n    mig: {layouts: " + a100 + "}\n"),
			field: "spec.nodePools[0].nodeSelector[nvidia.com/gpu.product]", msg: "NVIDIA-A10G has no MIG",
		},
		"MIG on a family without MIG": {
			doc:   pool("    nodeSelector: {nvidia.com/gpu.family: ada-lovelace}\n    devicePlugin: {migStrategy: mixed}\n    mig: {layouts: " + a100 + "}\n"),
			fixed: pool("    nodeSelector: {nvidia.com/gpu.family: ampere}\n    devicePlugin: {migStrategy: mixed}\n    mig: {layouts: " + a100 + "}\n"),
			field: "spec.nodePools[0].nodeSelector[nvidia.com/gpu.family]", msg: "which have no MIG",
		},
		"MIG where mig.capable is false": {
			doc:   pool("    nodeSelector: {nvidia.com/mig.capable: \"false\"}\n    devicePlugin: {migStrategy: mixed}\n    mig: {layouts: " + a100 + "}\n"),
			fixed: pool("    nodeSelector: {nvidia.com/mig.capable: \"true\"}\n    devicePlugin: {migStrategy: mixed}\n    mig: {layouts: " + a100 + "}\n"),
			field: "spec.nodePools[0].nodeSelector[nvidia.com/mig.capable]", msg: "GPUs without MIG",
		},
		"gpuProduct is another model than the selected one": {
			doc:   pool("    nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}\n    devicePlugin: {migStrategy: mixed}\n    mig: {gpuProduct: NVIDIA-A100-SXM4-80GB, layouts: " + a100 + "}\n"),
			fixed: pool("    nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}\n    devicePlugin: {migStrategy: mixed}\n    mig: {gpuProduct: NVIDIA-A100-SXM4-80GB, layouts: " + a100 + "}\n"),
			field: "spec.nodePools[0].mig.gpuProduct", msg: "another model",
		},
		"gpuProduct of another family than the selected one": {
			doc:   pool("    nodeSelector: {nvidia.com/gpu.family: hopper}\n    devicePlugin: {migStrategy: mixed}\n    mig: {gpuProduct: NVIDIA-A100-SXM4-80GB, layouts: " + a100 + "}\n"),
			fixed: pool("    nodeSelector: {nvidia.com/gpu.family: ampere}\n    devicePlugin: {migStrategy: mixed}\n    mig: {gpuProduct: NVIDIA-A100-SXM4-80GB, layouts: " + a100 + "}\n"),
			field: "spec.nodePools[0].mig.gpuProduct", msg: "is a ampere GPU",
		},
		"layouts checked against the selected model": {
			doc:   pool("    nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB}\n    devicePlugin: {migStrategy: mixed}\n    mig: {layouts: " + a100 + "}\n"),
			fixed: pool("    nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB}\n    devicePlugin: {migStrategy: mixed}\n    mig: {layouts: {all-1g: [{devices: all, profiles: {\"1g.5gb\": 7}}]}}\n"),
			field: "spec.nodePools[0].mig.layouts[all-1g][0].profiles", msg: "does not fit one NVIDIA-A100-SXM4-40GB",
		},
		"a GPU index beyond the selected count": {
			doc:   pool("    nodeSelector: {nvidia.com/gpu.count: \"4\", pool: a}\n    devicePlugin: {migStrategy: mixed}\n    mig: {layouts: {half: [{devices: [0, 1, 2, 3, 4, 5, 6, 7], profiles: {\"1g.10gb\": 7}}]}}\n"),
			fixed: pool("    nodeSelector: {nvidia.com/gpu.count: \"8\", pool: a}\n    devicePlugin: {migStrategy: mixed}\n    mig: {layouts: {half: [{devices: [0, 1, 2, 3, 4, 5, 6, 7], profiles: {\"1g.10gb\": 7}}]}}\n"),
			field: "spec.nodePools[0].mig.layouts[half][0].devices[4]", msg: "GPU 4 does not exist",
		},
		"Blackwell pool on an older pool driver": {
			doc:   pool("    nodeSelector: {nvidia.com/gpu.family: blackwell}\n    driver: {version: \"550.163.01\"}\n"),
			fixed: pool("    nodeSelector: {nvidia.com/gpu.family: blackwell}\n    driver: {version: \"575.57.08\"}\n"),
			field: "spec.nodePools[0].driver.version", msg: "need driver branch R570",
		},
		"Blackwell pool on the older spec driver": {
			doc:   strings.Replace(pool("    nodeSelector: {nvidia.com/gpu.product: NVIDIA-B200}\n"), `"580.95.05"`, `"535.261.03"`, 1),
			fixed: pool("    nodeSelector: {nvidia.com/gpu.product: NVIDIA-B200}\n"),
			field: "spec.nodePools[0].nodeSelector[nvidia.com/gpu.product]", msg: "need driver branch R570",
		},
		"Blackwell pool on the proprietary kernel modules": {
			doc:   pool("    nodeSelector: {nvidia.com/gpu.family: blackwell}\n    driver: {kernelModuleType: proprietary}\n"),
			fixed: pool("    nodeSelector: {nvidia.com/gpu.family: blackwell}\n    driver: {kernelModuleType: open}\n"),
			field: "spec.nodePools[0].driver.kernelModuleType", msg: "blackwell GPUs (nvidia.com/gpu.family=blackwell), which run only NVIDIA's open kernel modules, but its driver's kernelModuleType is proprietary",
		},
		"Blackwell pool inheriting proprietary from spec.driver": {
			doc:   strings.Replace(pool("    nodeSelector: {nvidia.com/gpu.product: NVIDIA-B200}\n"), `{version: "580.95.05"}`, `{version: "580.95.05", kernelModuleType: proprietary}`, 1),
			fixed: pool("    nodeSelector: {nvidia.com/gpu.product: NVIDIA-B200}\n"),
			field: "spec.nodePools[0].nodeSelector[nvidia.com/gpu.product]", msg: "(spec.driver.kernelModuleType)",
		},
		"Grace Hopper on the proprietary kernel modules": {
			doc:   pool("    nodeSelector: {nvidia.com/gpu.product: NVIDIA-GH200-480GB}\n    driver: {kernelModuleType: proprietary}\n"),
			fixed: pool("    nodeSelector: {nvidia.com/gpu.product: NVIDIA-GH200-480GB}\n    driver: {kernelModuleType: auto}\n"),
			field: "spec.nodePools[0].driver.kernelModuleType", msg: "Grace Hopper GPUs",
		},
		"Volta on the open kernel modules": {
			doc:   pool("    nodeSelector: {nvidia.com/gpu.product: Tesla-V100-SXM2-16GB}\n    driver: {kernelModuleType: open}\n"),
			fixed: pool("    nodeSelector: {nvidia.com/gpu.product: Tesla-V100-SXM2-16GB}\n    driver: {kernelModuleType: proprietary}\n"),
			field: "spec.nodePools[0].driver.kernelModuleType", msg: "which the open kernel modules do not support (Turing and later do)",
		},
		"selecting the sharing strategy the pool changes": {
			doc:   pool("    nodeSelector: {nvidia.com/gpu.sharing-strategy: none}\n    devicePlugin: {resourceName: nvidia.com/gpu.shared, sharing: {timeSlicing: {replicas: 4}}}\n"),
			fixed: pool("    nodeSelector: {nvidia.com/gpu.sharing-strategy: time-slicing}\n    devicePlugin: {resourceName: nvidia.com/gpu.shared, sharing: {timeSlicing: {replicas: 4}}}\n"),
			field: "spec.nodePools[0].nodeSelector[nvidia.com/gpu.sharing-strategy]", msg: "leaves the pool",
		},
		"selecting the replicas the pool changes": {
			doc:   pool("    nodeSelector: {nvidia.com/gpu.replicas: \"1\"}\n    devicePlugin: {resourceName: nvidia.com/gpu.shared, sharing: {timeSlicing: {replicas: 4}}}\n"),
			fixed: pool("    nodeSelector: {nvidia.com/gpu.replicas: \"4\"}\n    devicePlugin: {resourceName: nvidia.com/gpu.shared, sharing: {timeSlicing: {replicas: 4}}}\n"),
			field: "spec.nodePools[0].nodeSelector[nvidia.com/gpu.replicas]", msg: "leaves the pool",
		},
		"selecting a MIG strategy the pool never writes": {
			doc:   pool("    nodeSelector: {nvidia.com/mig.strategy: single}\n"),
			fixed: pool("    nodeSelector: {nvidia.com/mig.strategy: single}\n    devicePlugin: {migStrategy: single}\n"),
			field: "spec.nodePools[0].nodeSelector[nvidia.com/mig.strategy]", msg: "writes no nvidia.com/mig.strategy",
		},
		"selecting the product that sharing renames": {
			doc:   pool("    nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}\n    devicePlugin: {sharing: {timeSlicing: {replicas: 4}}}\n"),
			fixed: pool("    nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}\n    devicePlugin: {resourceName: nvidia.com/gpu.shared, sharing: {timeSlicing: {replicas: 4}}}\n"),
			field: "spec.nodePools[0].nodeSelector[nvidia.com/gpu.product]", msg: "NVIDIA-A100-SXM4-80GB-SHARED",
		},
		"selecting a -SHARED product without sharing": {
			doc:   pool("    nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB-SHARED}\n"),
			fixed: pool("    nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB-SHARED}\n    devicePlugin: {sharing: {timeSlicing: {replicas: 2}}}\n"),
			field: "spec.nodePools[0].nodeSelector[nvidia.com/gpu.product]", msg: "only to a GPU shared (time-slicing or MPS)",
		},
	} {
		t.Run(name, func(t *testing.T) {
			res := load(t, tc.doc)
			if !has(res, want{validate.SeverityError, tc.field, tc.msg}) {
				t.Fatalf("want error at %s containing %q:\n%s\ngot:\n%s", tc.field, tc.msg, tc.doc, res.Text(""))
			}
			fixed := load(t, tc.fixed)
			for _, r := range fixed {
				if r.Severity == validate.SeverityError {
					t.Fatalf("the consistent twin is refused:\n%s\n%s", tc.fixed, fixed.Text(""))
				}
			}
		})
	}
}
