// Package driver validates a node's NVIDIA driver against the policy: the kernel module's
// version from /proc (readable without NVML, so before the toolkit stage), NVML's driver and
// CUDA driver versions when the library is there, compared under enforce exact|branch|none.
package driver

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
	"github.com/gpupolicy/gpupolicy/plugin/nodefacts"
)

// Enforce rules (spec.driver.enforce): plugin/config's, which also compares.
const (
	EnforceExact  = config.DriverEnforceExact
	EnforceBranch = config.DriverEnforceBranch
	EnforceNone   = config.DriverEnforceNone
)

// NVMLVersions is NVML's view of the driver that the verdict uses.
type NVMLVersions struct {
	Driver string
	CUDA   string // "12.8": the newest CUDA this driver supports
}

// QueryNVML reads the driver and CUDA driver versions (nodefacts' reader); the first of them
// that NVML does not answer is the error. The NVML library's own version is not needed here.
func QueryNVML(lib nvml.Interface) (NVMLVersions, error) {
	d, failed := nodefacts.ReadDriver(lib)
	for _, f := range failed {
		if f.Call != nodefacts.CallNVMLVersion {
			return NVMLVersions{}, f
		}
	}
	return NVMLVersions{Driver: d.Version, CUDA: d.CUDAVersion}, nil
}

// Verdict is the comparison of a node's driver with the policy.
type Verdict struct {
	Expected  string
	Found     string // kernel module version
	Enforce   string
	NVML      *NVMLVersions // nil when NVML was not consulted
	Satisfied bool          // the gate may open
	Drift     bool          // Found != Expected, whatever the enforce rule
	Reason    string
	// Modules is the loaded module's flavour (open | proprietary), "" when unknown.
	Modules string `json:",omitempty"`
}

// CheckModules adds the kernel module's flavour to the verdict: found (open | proprietary, ""
// when unknown) against the policy's kernelModules. The other flavour is drift and closes the
// gate unless enforce is none: a Blackwell GPU under the proprietary module finds no device,
// and a pool that asked for one flavour must not run the other unnoticed.
func (v *Verdict) CheckModules(pol config.AgentDriver, found string) {
	v.Modules = found
	want := pol.KernelModules
	if found == "" || want == "" || want == config.KernelModulesAuto || want == found {
		return
	}
	v.Drift = true
	if v.Enforce != EnforceNone {
		v.Satisfied = false
	}
	v.Reason = appendReason(v.Reason, fmt.Sprintf("drift: the %s kernel module is loaded, the policy asks for %s (driver.kernelModuleType)", found, want))
}

func appendReason(r, more string) string {
	if r == "" {
		return more
	}
	return r + "; " + more
}

// Compare judges found (and NVML's view, if any) against the policy under plugin/config's
// driver version rule: versions compare as numbers (580.95.5 is 580.95.05), so the verdict
// does not hang on how a version is spelt.
func Compare(pol config.AgentDriver, cudaVersion, found string, nv *NVMLVersions) Verdict {
	v := Verdict{Expected: pol.Version, Found: found, Enforce: pol.Enforce, NVML: nv}
	if v.Enforce == "" {
		v.Enforce = EnforceBranch
	}
	want, err := config.ParseDriverVersion(pol.Version)
	if err != nil {
		v.Reason = "driver.version in the agent config: " + err.Error() + " (re-render it with gpupolicy-fn)"
		return v
	}
	have, err := config.ParseDriverVersion(found)
	if err != nil {
		v.Drift = true
		v.Satisfied = v.Enforce == EnforceNone // any driver, even one whose version reads oddly
		v.Reason = "the node's driver: " + err.Error()
		return v
	}
	v.Drift = !have.Equal(want)
	if v.Satisfied, err = config.DriverSatisfies(v.Enforce, want, have); err != nil {
		v.Reason = "agent config: " + err.Error()
		return v
	}
	v.Reason = fmt.Sprintf("driver %s, policy expects %s (enforce %s)", found, pol.Version, v.Enforce)
	if v.Drift {
		v.Reason = "drift: " + v.Reason
	}
	if nv == nil || v.Enforce == EnforceNone {
		return v
	}
	if lib, err := config.ParseDriverVersion(nv.Driver); nv.Driver != "" && (err != nil || !lib.Equal(have)) {
		v.Satisfied = false
		v.Reason += fmt.Sprintf("; NVML library is %s but the kernel module is %s: user-space and kernel driver differ (reboot or reinstall the driver)", nv.Driver, found)
	}
	if need, err := gpulib.ParseCUDAVersion(cudaVersion); err == nil && nv.CUDA != "" {
		if have, err := gpulib.ParseCUDAVersion(nv.CUDA); err == nil && have < need {
			v.Satisfied = false
			v.Reason += fmt.Sprintf("; driver supports CUDA up to %s but the policy's cuda.version is %s", nv.CUDA, cudaVersion)
		}
	}
	return v
}

// Labels are the node labels and annotations a verdict sets ("" removes a key).
func (v Verdict) Labels() (labels, annotations map[string]string) {
	labels = map[string]string{config.LabelDriverVersion: v.Found, config.LabelDriverDrift: "", config.LabelDriverKernelModules: v.Modules}
	annotations = map[string]string{config.AnnotationDriverDrift: ""}
	if v.Drift {
		labels[config.LabelDriverDrift] = "true"
		annotations[config.AnnotationDriverDrift] = fmt.Sprintf("expected %s (enforce %s), found %s", v.Expected, v.Enforce, v.Found)
		if v.Modules != "" {
			annotations[config.AnnotationDriverDrift] += " (" + v.Modules + " kernel module)"
		}
	}
	return labels, annotations
}
