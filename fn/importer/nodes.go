package importer

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/validate/matrix"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// NFD's OS labels, from which the driver image's OS suffix is read.
const (
	labelOSID      = "feature.node.kubernetes.io/system-os_release.ID"
	labelOSVersion = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
)

// fact is one version read from each GPU Node: the value the policy takes and how it was
// chosen.
type fact struct {
	flag, field string                   // "--driver-version", "spec.driver.version"
	read        func(corev1.Node) string // "" when the Node does not say
	pick        func(values []string) string
	why         string // how pick chooses, for the comment
	opt         string
	out         *string
	required    bool
}

// versions fills the versions a ClusterPolicy does not hold (Kubernetes, containerd, the
// driver on preinstalled nodes, CUDA, the driver image's OS) from opts, else from the GPU
// Nodes of the input; a required one that neither gives is an error naming the flag.
func (m *mapper) versions(in *Input, opts Options) {
	s := &m.r.Policy.Spec
	nodes := gpuNodes(in.Nodes)
	for _, n := range nodes {
		if rt := n.Status.NodeInfo.ContainerRuntimeVersion; rt != "" && !strings.HasPrefix(rt, "containerd://") {
			m.fail("Node %s runs %s: gpupolicy configures containerd only", n.Name, rt)
		}
	}
	facts := []fact{
		{"--kubernetes-version", "spec.kubernetesVersion", kubeletMinor, lowest, "the lowest kubelet minor", opts.KubernetesVersion, &s.KubernetesVersion, true},
		{"--containerd-version", "spec.containerRuntime.version", containerdMinor, lowest, "the lowest containerd minor", opts.ContainerdVersion, &s.ContainerRuntime.Version, true},
		{"--driver-version", "spec.driver.version", driverVersion, mostCommon, "the driver most GPU nodes run", opts.DriverVersion, &s.Driver.Version, true},
		{"--cuda-version", "spec.cuda.version", cudaVersion, lowest, "the newest CUDA every GPU node's driver supports; lower it to your workloads' CUDA", opts.CUDAVersion, &s.CUDA.Version, true},
		{"--driver-os", "spec.driver.os", driverOS, mostCommon, "the OS most GPU nodes run", opts.DriverOS, &s.Driver.OS, false},
	}
	// The driver image's OS matters only where a driver container runs.
	container := s.Driver.Source == v1alpha1.SourceContainer || slices.ContainsFunc(s.NodePools, func(p v1alpha1.NodePool) bool {
		return p.Driver != nil && p.Driver.Source == v1alpha1.SourceContainer
	})
	if !container {
		facts = facts[:len(facts)-1]
	}
	var missing []error
	for _, f := range facts {
		switch {
		case f.opt != "":
			*f.out = f.opt
			m.set(f.field, f.flag)
			continue
		case *f.out != "":
			continue // the operator's objects said it (a container driver's version)
		}
		var values []string
		for _, n := range nodes {
			if v := f.read(n); v != "" {
				values = append(values, v)
			}
		}
		if len(values) == 0 {
			if f.required {
				missing = append(missing, fmt.Errorf("%s: no GPU Node of the input says it (pass %s, or add the cluster's Nodes: kubectl get nodes -o yaml)", f.field, f.flag))
			}
			continue
		}
		*f.out = f.pick(values)
		m.set(f.field, fmt.Sprintf("%s of %d GPU Nodes", f.why, len(values)))
		if distinct := uniq(values); len(distinct) > 1 {
			m.r.Notes = append(m.r.Notes, fmt.Sprintf("%s: the GPU Nodes differ (%s); the policy takes %s (%s)", f.field, strings.Join(distinct, ", "), *f.out, f.why))
		}
	}
	m.errs = append(m.errs, missing...)
	if s.Driver.OS == v1alpha1.DefaultDriverOS {
		s.Driver.OS = "" // the default says it
	}
}

func uniq(values []string) []string {
	out := slices.Clone(values)
	slices.Sort(out)
	return slices.Compact(out)
}

func kubeletMinor(n corev1.Node) string {
	v := strings.TrimPrefix(n.Status.NodeInfo.KubeletVersion, "v")
	return minor(v)
}

func containerdMinor(n corev1.Node) string {
	rt := n.Status.NodeInfo.ContainerRuntimeVersion
	v, ok := strings.CutPrefix(rt, "containerd://")
	if !ok {
		return ""
	}
	return minor(strings.TrimPrefix(v, "v"))
}

// minor is "1.34" of "1.34.1" (and of "1.34.1-gke.100").
func minor(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return ""
	}
	return parts[0] + "." + strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
}

// driverVersion reads gpu-feature-discovery's driver labels.
func driverVersion(n corev1.Node) string {
	l := n.Labels
	if v := l[config.LabelCUDADriverFull]; v != "" {
		return v
	}
	if l[config.LabelLegacyDriverMajor] != "" && l[config.LabelLegacyDriverMinor] != "" {
		v := l[config.LabelLegacyDriverMajor] + "." + l[config.LabelLegacyDriverMinor]
		if r := l[config.LabelLegacyDriverRev]; r != "" {
			v += "." + r
		}
		return v
	}
	return ""
}

// cudaVersion reads gpu-feature-discovery's CUDA label: the newest CUDA the node's driver
// supports.
func cudaVersion(n corev1.Node) string {
	l := n.Labels
	if v := l[config.LabelCUDARuntimeFull]; v != "" {
		return minor(v + ".0")
	}
	for _, prefix := range []string{"nvidia.com/cuda.runtime-version.", "nvidia.com/cuda.runtime."} { // GFD writes both
		if major := l[prefix+"major"]; major != "" {
			return major + "." + l[prefix+"minor"]
		}
	}
	return ""
}

// driverOS is NVIDIA's driver image suffix ("ubuntu22.04") from NFD's OS labels.
func driverOS(n corev1.Node) string {
	id, ver := n.Labels[labelOSID], n.Labels[labelOSVersion]
	if id == "" || ver == "" {
		return ""
	}
	return id + ver
}

func mostCommon(values []string) string {
	count := map[string]int{}
	best := ""
	for _, v := range values {
		count[v]++
	}
	for _, v := range uniq(values) {
		if count[v] > count[best] {
			best = v
		}
	}
	return best
}

func lowest(values []string) string {
	best := ""
	for _, v := range uniq(values) {
		if best == "" || less(v, best) {
			best = v
		}
	}
	return best
}

// less compares dotted versions numerically ("1.9" < "1.10").
func less(a, b string) bool {
	va, errA := matrix.ParseVersion(a)
	vb, errB := matrix.ParseVersion(b)
	if errors.Join(errA, errB) != nil {
		return a < b
	}
	return va.Less(vb)
}
