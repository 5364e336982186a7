package toolkit

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/plugin/agent/hostfs"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// CDI spec generation. With deviceListStrategy cdi-cri the device plugin answers Allocate
// with CDI device names "nvidia.com/gpu=<uuid>", and containerd (enable_cdi) resolves them
// from the specs in /var/run/cdi. NVIDIA's own device plugin writes that spec itself; here the
// toolkit stage does, since it already runs the node's programs chrooted into the host: the
// node's nvidia-ctk inspects the node's driver and GPUs and names every device by UUID.

// cdiScratch is where nvidia-ctk writes its candidate spec (a host path, so the chrooted
// nvidia-ctk and the installer see the same file). It is outside the CDI spec directories so
// containerd never reads a candidate, and ends in .yaml because nvidia-ctk appends the format
// extension to an output path without one.
const cdiScratch = "/var/lib/gpupolicy/cdi-candidate.yaml"

// ctkCandidates are the host's PATH directories, where distribution packages of the NVIDIA
// Container Toolkit put nvidia-ctk (toolkit.source: preinstalled).
var ctkCandidates = []string{"/usr/bin/nvidia-ctk", "/usr/local/bin/nvidia-ctk", "/bin/nvidia-ctk", "/usr/sbin/nvidia-ctk", "/sbin/nvidia-ctk", "/opt/bin/nvidia-ctk"}

// uuidName is how nvidia-ctk names devices under --device-name-strategy=uuid: NVML's UUIDs
// of full GPUs (GPU-...) and MIG devices (MIG-...).
var uuidName = regexp.MustCompile(`^(GPU|MIG)-[0-9A-Za-z-]+$`)

// cdiSpec holds the fields of a CDI spec the installer checks before it installs one.
type cdiSpec struct {
	CDIVersion string `json:"cdiVersion"`
	Kind       string `json:"kind"`
	Devices    []struct {
		Name           string         `json:"name"`
		ContainerEdits map[string]any `json:"containerEdits"`
	} `json:"devices"`
}

// findCTK returns the host path of nvidia-ctk: the flag's path, else the first of the host's
// PATH directories that holds it.
func (h Host) findCTK(flag string) (string, error) {
	if flag != "" {
		if st, err := hostfs.Stat(h.Root, flag); err != nil {
			return "", fmt.Errorf("--nvidia-ctk %s: %w", flag, err)
		} else if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			return "", fmt.Errorf("--nvidia-ctk %s is not an executable file", flag)
		}
		return flag, nil
	}
	for _, c := range ctkCandidates {
		if st, err := hostfs.Stat(h.Root, c); err == nil && st.Mode().IsRegular() {
			return c, nil
		}
	}
	return "", fmt.Errorf("nvidia-ctk is not installed on the node (looked in %s): install the NVIDIA Container Toolkit package, or set --nvidia-ctk (toolkit.source: container installs it in /usr/local/nvidia/toolkit)",
		strings.Join(ctkCandidates, ", "))
}

// hookFlag names, in the spec's hooks, the CDI hook next to this nvidia-ctk: the spec's hooks
// run on the host at container creation, and nvidia-ctk's default (/usr/bin) is wrong for a
// toolkit installed elsewhere (toolkit.source: container puts it in /usr/local/nvidia/toolkit).
// Toolkits before 1.17 have no nvidia-cdi-hook; their hooks are nvidia-ctk itself, named by
// --nvidia-ctk-path (an alias of --nvidia-cdi-hook-path in later versions).
func (h Host) hookFlag(ctk string) string {
	hook := filepath.Join(filepath.Dir(ctk), "nvidia-cdi-hook")
	if st, err := hostfs.Stat(h.Root, hook); err == nil && st.Mode().IsRegular() {
		return "--nvidia-cdi-hook-path=" + hook
	}
	return "--nvidia-ctk-path=" + ctk
}

// validateCDISpec refuses a spec the device plugin's CDI names cannot resolve against.
func validateCDISpec(b []byte) error {
	var s cdiSpec
	if err := yaml.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("not a CDI spec: %w", err)
	}
	switch {
	case s.CDIVersion == "":
		return errors.New("no cdiVersion")
	case s.Kind != config.CDIKind:
		return fmt.Errorf("kind is %q, but the device plugin asks for %s=<uuid>", s.Kind, config.CDIKind)
	}
	byUUID := 0
	for _, d := range s.Devices {
		switch {
		case d.Name == "all":
		case !uuidName.MatchString(d.Name):
			return fmt.Errorf("device %q is not named by UUID (GPU-... or MIG-...): nvidia-ctk ignored --device-name-strategy=uuid", d.Name)
		default:
			byUUID++
		}
		if len(d.ContainerEdits) == 0 {
			return fmt.Errorf("device %q has no containerEdits, so it would inject nothing", d.Name)
		}
	}
	if byUUID == 0 {
		return errors.New("no device named by UUID: nvidia-ctk found no GPU (is the driver loaded?)")
	}
	return nil
}

// installCDISpec generates the node's CDI spec with the node's nvidia-ctk, checks it and
// installs it at in.CDISpec atomically; the same bytes are not rewritten. A failure leaves
// the installed spec as it was. It reports whether it wrote.
func (in *Installer) installCDISpec(ctx context.Context) (bool, error) {
	if in.CDISpec == "" {
		return false, nil
	}
	h := in.host()
	bin, err := h.findCTK(in.NvidiaCTK)
	if err != nil {
		return false, fmt.Errorf("CDI spec %s: %w", in.CDISpec, err)
	}
	if err := hostfs.MkdirAll(in.HostRoot, filepath.Dir(cdiScratch)); err != nil {
		return false, err
	}
	// A candidate a killed run left behind must not pass for this run's output.
	if _, err := in.Writer.Remove(in.HostRoot, cdiScratch); err != nil {
		return false, err
	}
	defer func() { _, _ = hostfs.Writer{}.Remove(in.HostRoot, cdiScratch) }()
	args := []string{"cdi", "generate", "--device-name-strategy=uuid", "--output=" + cdiScratch, h.hookFlag(bin)}
	if in.CDIDriverRoot != "" && in.CDIDriverRoot != "/" {
		args = append(args, "--driver-root="+in.CDIDriverRoot)
	}
	if _, err := h.Command(ctx, bin, args...); err != nil {
		return false, fmt.Errorf("CDI spec %s: nvidia-ctk cdi generate failed: %w", in.CDISpec, err)
	}
	b, err := hostfs.ReadFile(in.HostRoot, cdiScratch)
	if err != nil {
		return false, fmt.Errorf("CDI spec %s: %s %s wrote no spec: %w", in.CDISpec, bin, strings.Join(args, " "), err)
	}
	if err := validateCDISpec(b); err != nil {
		return false, fmt.Errorf("CDI spec %s: output of %s cdi generate refused: %w", in.CDISpec, bin, err)
	}
	wrote, err := in.Writer.WriteOwned(in.HostRoot, in.CDISpec, b, 0o644)
	if err != nil {
		return false, fmt.Errorf("CDI spec %s: %w", in.CDISpec, err)
	}
	if wrote {
		in.log().Info("CDI spec installed", "path", in.CDISpec, "generatedBy", bin)
	}
	return wrote, nil
}
