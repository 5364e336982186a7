package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Versions of the control plane the suite runs; hack/build-binaries.sh uses the same defaults
// and the cache directory is keyed by all three, so bumping one rebuilds only what changed.
const (
	KubernetesVersion = "v1.37.2"
	EtcdVersion       = "v3.6.16"
	KwokVersion       = "v0.8.0"
)

// Binaries are the executables a cluster runs, plus kwok's stage configs.
type Binaries struct {
	Dir                   string
	Etcd                  string
	KubeAPIServer         string
	KubeControllerManager string
	KubeScheduler         string
	Kubelet               string // the real node's kubelet (e2e/realnode)
	Kwok                  string
	KwokStages            string // the stage tree shipped in kwok's module (kustomize/stage)
}

// BinDir is the cache directory for this version set: $GPUPOLICY_CACHE (default
// ~/.cache/gpupolicy)/e2e-bin/k8s-<v>-etcd-<v>-kwok-<v>. E2E_BIN_DIR overrides it.
func BinDir() (string, error) {
	if d := os.Getenv("E2E_BIN_DIR"); d != "" {
		return d, nil
	}
	cache := os.Getenv("GPUPOLICY_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no home directory for the binary cache; set GPUPOLICY_CACHE: %w", err)
		}
		cache = filepath.Join(home, ".cache", "gpupolicy")
	}
	return filepath.Join(cache, "e2e-bin", fmt.Sprintf("k8s-%s-etcd-%s-kwok-%s", KubernetesVersion, EtcdVersion, KwokVersion)), nil
}

// EnsureBinaries returns the cached binaries, running buildScript (hack/build-binaries.sh)
// first when any is missing (a cache from before the kubelet was added builds only the kubelet,
// ~80 s warm). The cold build takes ~15 minutes on two cores; it prints progress
// to stderr so a long first run is visibly busy.
func EnsureBinaries(buildScript string) (*Binaries, error) {
	dir, err := BinDir()
	if err != nil {
		return nil, err
	}
	b := binariesIn(dir)
	if b.missing() != "" && os.Getenv("E2E_BIN_DIR") == "" {
		cmd := exec.Command("bash", buildScript)
		cmd.Env = append(os.Environ(),
			"K8S_VERSION="+KubernetesVersion, "ETCD_VERSION="+EtcdVersion, "KWOK_VERSION="+KwokVersion)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("%s failed: %w", buildScript, err)
		}
	}
	if m := b.missing(); m != "" {
		return nil, fmt.Errorf("%s is missing; build it with e2e/hack/build-binaries.sh (or point E2E_BIN_DIR at a directory holding etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kwok and kwok-stages/)", m)
	}
	return b, nil
}

func binariesIn(dir string) *Binaries {
	return &Binaries{
		Dir:                   dir,
		Etcd:                  filepath.Join(dir, "etcd"),
		KubeAPIServer:         filepath.Join(dir, "kube-apiserver"),
		KubeControllerManager: filepath.Join(dir, "kube-controller-manager"),
		KubeScheduler:         filepath.Join(dir, "kube-scheduler"),
		Kubelet:               filepath.Join(dir, "kubelet"),
		Kwok:                  filepath.Join(dir, "kwok"),
		KwokStages:            filepath.Join(dir, "kwok-stages"),
	}
}

func (b *Binaries) missing() string {
	for _, p := range []string{b.Etcd, b.KubeAPIServer, b.KubeControllerManager, b.KubeScheduler, b.Kubelet, b.Kwok} {
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			return p
		}
	}
	if _, err := os.Stat(filepath.Join(b.KwokStages, "pod", "fast")); err != nil {
		return filepath.Join(b.KwokStages, "pod", "fast")
	}
	return ""
}

// kwokStageConfig concatenates the Stage documents of the named stage sets (e.g. "node/fast")
// into one file for kwok's --config. Each set's kustomization.yaml lists its files; reading the
// list (rather than globbing) skips the test data that lives next to them.
func kwokStageConfig(stagesDir, out string, unready []string, sets ...string) error {
	var docs []string
	for _, set := range sets {
		dir := filepath.Join(stagesDir, set)
		kust, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			return fmt.Errorf("kwok stage set %s: %w", set, err)
		}
		inResources := false
		for _, line := range strings.Split(string(kust), "\n") {
			switch {
			case strings.HasPrefix(line, "resources:"):
				inResources = true
			case inResources && strings.HasPrefix(strings.TrimSpace(line), "- "):
				f := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "- "))
				b, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil {
					return fmt.Errorf("kwok stage set %s: %w", set, err)
				}
				docs = append(docs, strings.TrimSpace(string(b)))
			case inResources && line != "" && !strings.HasPrefix(line, " "):
				inResources = false
			}
		}
	}
	if len(docs) == 0 {
		return fmt.Errorf("no kwok stages found under %s for %v", stagesDir, sets)
	}
	if len(unready) > 0 {
		var err error
		if docs, err = holdReadiness(docs, unready); err != nil {
			return err
		}
	}
	return os.WriteFile(out, []byte(strings.Join(docs, "\n---\n")+"\n"), 0o644)
}

// holdReadiness splits kwok's pod-ready stage: pods with one of the named containers get a
// copy that runs them with Ready (and ContainersReady, and each container's ready) false; the
// original stage keeps every other pod. Someone else (the test's readiness mirror) then sets
// their readiness from the real program's /readyz.
func holdReadiness(docs, containers []string) ([]string, error) {
	const marker = "name: pod-ready\n"
	values := ""
	for _, c := range containers {
		values += fmt.Sprintf("\n      - %q", c)
	}
	selector := "  selector:\n    matchExpressions:\n"
	for i, d := range docs {
		if !strings.Contains(d, marker) {
			continue
		}
		if !strings.Contains(d, selector) || strings.Count(d, `status: "True"`) < 3 || !strings.Contains(d, "ready: true") {
			return nil, fmt.Errorf("kwok's pod-ready stage changed shape; cannot hold readiness for %v", containers)
		}
		others := strings.Replace(d, selector, selector+"    - key: '.spec.containers.[].name'\n      operator: 'NotIn'\n      values:"+values+"\n", 1)
		held := strings.Replace(d, marker, "name: pod-running-unready\n", 1)
		held = strings.Replace(held, selector, selector+"    - key: '.spec.containers.[].name'\n      operator: 'In'\n      values:"+values+"\n", 1)
		// Initialized stays True; Ready and ContainersReady, and the containers, are not.
		held = strings.Replace(held, "status: \"True\"\n        type: Ready\n", "status: \"False\"\n        type: Ready\n", 1)
		held = strings.Replace(held, "status: \"True\"\n        type: ContainersReady\n", "status: \"False\"\n        type: ContainersReady\n", 1)
		held = strings.Replace(held, "  - image: {{ .image | Quote }}\n        name: {{ .name | Quote }}\n        ready: true\n", "  - image: {{ .image | Quote }}\n        name: {{ .name | Quote }}\n        ready: false\n", 1)
		// The held pods' Ready stays False, so the stage's own selector must stop at Running.
		held = strings.Replace(held, "    - key: '.status.conditions.[] | select( .type == \"Ready\" ) | .status'\n      operator: 'NotIn'\n      values:\n      - 'True'\n", "", 1)
		if !strings.Contains(held, "status: \"False\"\n        type: Ready\n") || !strings.Contains(held, "ready: false\n") ||
			strings.Contains(held, `select( .type == "Ready" )`) {
			return nil, fmt.Errorf("could not derive the held-readiness stage from kwok's pod-ready stage")
		}
		docs[i] = others
		return append(docs, held), nil
	}
	return nil, fmt.Errorf("kwok's pod stages have no pod-ready stage; cannot hold readiness for %v", containers)
}

// BuildPeer runs a peer's build script (e2e/hack/build-*.sh: it returns at once when its cache
// is complete, and logs to stderr while it builds) and returns the directory it prints on its
// last line.
func BuildPeer(script string, args ...string) (string, error) {
	cmd := exec.Command("bash", append([]string{script}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s failed: %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}
