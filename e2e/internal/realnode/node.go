// Package realnode runs one real Kubernetes node on the test machine: a real containerd (Debian's
// 1.6 or a built 2.1) and a real kubelet, in their own mount and PID namespaces so the host's
// /var/lib/kubelet, /etc/containerd, /proc/driver and the rest stay untouched. The kubelet's
// device-plugin directory is fixed (/var/lib/kubelet/device-plugins), so one real node runs at
// a time on a machine, or one per mount namespace as here.
//
// The node's paths are directories under Node.Dir/rootfs bound over the real ones inside the
// namespace; HostPath maps a node path to where the test reads it. containerd and the kubelet
// are supervised as systemd would: both are started again when they exit (the toolkit stage's
// restartMode signal relies on that), and each start is recorded.
package realnode

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpupolicy/gpupolicy/e2e/internal/cluster"
)

// Options describe the node.
type Options struct {
	Name       string // node name (the kubelet's --hostname-override); a DNS label
	Containerd string // "1.6": Debian's /usr/bin/containerd (config v2); "2.1": the binaries in Containerd21Dir (config v3)
	// Containerd21Dir holds containerd, containerd-shim-runc-v2 and ctr 2.1
	// (e2e/hack/build-containerd.sh); needed for Containerd "2.1".
	Containerd21Dir string
	Kubelet         string // kubelet binary
	Kubeconfig      string // the kubelet's kubeconfig for the API server
	APIServer       string // https://127.0.0.1:PORT: the kubernetes Service 10.96.0.1:443 is DNATed here for pods
	Dir             string // work directory; logs under Dir/logs
	PodCIDR         string // default 10.244.7.0/24
	Bridge          string // CNI bridge, default gpue2e0
	Labels          map[string]string
	// DriverVersion is written to the node's /proc/driver/nvidia/version as the loaded kernel
	// module's version (the driver validator reads it); "" leaves the driver unloaded.
	DriverVersion string
	// Images are docker-archive tarballs imported into containerd's k8s.io namespace before the
	// kubelet starts (nothing can be pulled here).
	Images []string
}

// Node is a running real node.
type Node struct {
	Name    string
	Dir     string
	LogDir  string
	opts    Options
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	created []string // host mount points this node created, removed again in Stop
	cleanup []func() error
	ctr     string
	pidNS   string   // the namespace's /proc/PID/ns/pid link, read once it runs
	lock    *os.File // LockFile, held from Start to Stop
}

// nodePaths are bound from Dir/rootfs into the namespace. /var/run is a link to /run on
// Debian, so the CDI directory is named by its real path. /var/lib/gpupolicy-e2e is where the
// stand-in nvidia-container-runtime records the OCI specs it receives (e2e/internal/standin).
var nodePaths = []string{
	"/var/lib/kubelet", "/etc/containerd", "/run/containerd", "/var/lib/containerd",
	"/var/lib/gpupolicy", "/var/lib/gpupolicy-e2e", "/run/cdi", "/etc/cdi", "/usr/local/nvidia",
	"/var/log/pods", "/var/log/containers", "/etc/cni/net.d", "/var/lib/cni", "/run/netns",
	"/proc/driver", RuncRoot,
}

// Start brings the node up: containerd running with the node's own config, the images
// imported, the kubelet started (it registers the node with the API server). On error
// everything started is torn down; the logs stay under Dir/logs.
func Start(ctx context.Context, o Options) (_ *Node, err error) {
	if o.PodCIDR == "" {
		o.PodCIDR = "10.244.7.0/24"
	}
	if o.Bridge == "" {
		o.Bridge = "gpue2e0"
	}
	cfg, err := containerdConfig(o.Containerd)
	if err != nil {
		return nil, err
	}
	n := &Node{Name: o.Name, Dir: o.Dir, LogDir: filepath.Join(o.Dir, "logs"), opts: o, exited: make(chan struct{}), ctr: "/usr/bin/ctr"}
	if o.Containerd == "2.1" {
		if o.Containerd21Dir == "" {
			return nil, errors.New("realnode: Containerd 2.1 needs Containerd21Dir (e2e/hack/build-containerd.sh prints it)")
		}
		n.ctr = filepath.Join(o.Containerd21Dir, "ctr")
	}
	defer func() {
		if err != nil {
			n.Stop()
			err = fmt.Errorf("realnode %s: %w (logs in %s)", o.Name, err, n.LogDir)
		}
	}()
	// Before anything of the machine is touched; held until Stop.
	if n.lock, err = lockMachine(o.Name); err != nil {
		return nil, err
	}
	if err := n.prepare(cfg); err != nil {
		return nil, err
	}
	if err := n.network(); err != nil {
		return nil, err
	}
	if err := n.makeCgroupRoot(); err != nil {
		return nil, err
	}
	script := filepath.Join(o.Dir, "init.sh")
	if err := os.WriteFile(script, []byte(initScript), 0o755); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(n.LogDir, "init.log"))
	if err != nil {
		return nil, err
	}
	bin21 := "" // the 1.6 node runs Debian's binaries where they are
	if o.Containerd == "2.1" {
		bin21 = o.Containerd21Dir
	}
	n.cmd = exec.Command("unshare", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc", "--propagation", "private",
		"bash", script, o.Dir, bin21)
	n.cmd.Stdout, n.cmd.Stderr = log, log
	// If the test binary dies, unshare dies, and --kill-child takes the namespace with it.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start unshare: %w", err)
	}
	go func() {
		n.waitErr = n.cmd.Wait()
		log.Close()
		close(n.exited)
	}()
	if err := n.readPIDNS(); err != nil {
		return nil, err
	}
	if err := n.waitFile(ctx, "containerd-ready", time.Minute); err != nil {
		return nil, fmt.Errorf("containerd: %w\n%s", err, n.Tail("containerd", 20))
	}
	for _, img := range o.Images {
		if err := n.ImportImage(ctx, img); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "start-kubelet"), nil, 0o644); err != nil {
		return nil, err
	}
	return n, nil
}

// prepare writes the node's tree: its configs, the fake driver version, and the
// list of binds for the init script.
func (n *Node) prepare(containerdCfg string) error {
	o := n.opts
	root := filepath.Join(o.Dir, "rootfs")
	for _, d := range []string{n.LogDir, root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, p := range nodePaths {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			return err
		}
		// The mount point must exist on the host; create it for the run if it does not.
		if err := n.ensureMountPoint(p); err != nil {
			return err
		}
	}
	ports, err := cluster.FreePorts(2)
	if err != nil {
		return err
	}
	files := map[string]string{
		"/etc/containerd/config.toml":              containerdCfg,
		"/etc/cni/net.d/10-gpupolicy-e2e.conflist": cniConfig(o.Bridge, o.PodCIDR),
		"/var/lib/kubelet/config.yaml":             kubeletConfig(ports[0], ports[1], o.PodCIDR, n.cgroupRoot()),
	}
	if o.DriverVersion != "" {
		files["/proc/driver/nvidia/version"] = fmt.Sprintf("NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Tue Sep 23 09:00:00 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n", o.DriverVersion)
	}
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o644); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(root, RegistryConfigPath), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "binds"), []byte(strings.Join(nodePaths, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	args := []string{o.Kubelet,
		"--config=/var/lib/kubelet/config.yaml",
		"--kubeconfig=" + o.Kubeconfig,
		"--root-dir=/var/lib/kubelet",
		"--cert-dir=/var/lib/kubelet/pki",
		"--hostname-override=" + o.Name,
		"--v=2",
	}
	if len(o.Labels) > 0 {
		var ls []string
		for k, v := range o.Labels {
			ls = append(ls, k+"="+v)
		}
		sort.Strings(ls)
		args = append(args, "--node-labels="+strings.Join(ls, ","))
	}
	for _, a := range args {
		if strings.ContainsAny(a, " \t\n") {
			return fmt.Errorf("kubelet argument %q has white space (the init script splits on it)", a)
		}
	}
	return os.WriteFile(filepath.Join(o.Dir, "kubelet.args"), []byte(strings.Join(args, "\n")+"\n"), 0o644)
}

func (n *Node) ensureMountPoint(p string) error {
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	// Create the missing parents one by one so Stop removes exactly what was created.
	var missing []string
	for d := p; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o755); err != nil {
			return fmt.Errorf("create mount point %s: %w", missing[i], err)
		}
		n.created = append(n.created, missing[i])
	}
	return nil
}

// network prepares what a cluster gives pods and this machine lacks: IP forwarding, the CNI
// bridge with route_localnet, and the kubernetes Service (no kube-proxy here) DNATed to the
// API server on loopback. Each change is undone in Stop.
func (n *Node) network() error {
	o := n.opts
	host, port, err := net.SplitHostPort(strings.TrimPrefix(o.APIServer, "https://"))
	if err != nil {
		return fmt.Errorf("APIServer %q: want https://HOST:PORT: %w", o.APIServer, err)
	}
	if fwd, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); err == nil && strings.TrimSpace(string(fwd)) != "1" {
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
			return fmt.Errorf("net.ipv4.ip_forward=1: %w", err)
		}
		prev := strings.TrimSpace(string(fwd))
		n.cleanup = append(n.cleanup, func() error {
			return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte(prev), 0o644)
		})
	}
	n.removeStale()
	if err := n.addHostsLine(); err != nil {
		return err
	}
	if out, err := exec.Command("ip", "link", "add", o.Bridge, "type", "bridge").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link add %s: %v: %s", o.Bridge, err, out)
	}
	n.cleanup = append(n.cleanup, func() error {
		if out, err := exec.Command("ip", "link", "del", o.Bridge).CombinedOutput(); err != nil {
			return fmt.Errorf("ip link del %s: %v: %s", o.Bridge, err, out)
		}
		return nil
	})
	if out, err := exec.Command("ip", "link", "set", o.Bridge, "up").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set %s up: %v: %s", o.Bridge, err, out)
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+o.Bridge+"/route_localnet", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("route_localnet on %s: %w", o.Bridge, err)
	}
	rule := rule(o, host, port)
	if out, err := exec.Command("iptables", append([]string{"-t", "nat", "-A"}, rule...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("iptables DNAT of the kubernetes Service: %v: %s", err, out)
	}
	n.cleanup = append(n.cleanup, func() error {
		if out, err := exec.Command("iptables", append([]string{"-t", "nat", "-D"}, rule...)...).CombinedOutput(); err != nil {
			return fmt.Errorf("iptables -D %v: %v: %s", rule, err, out)
		}
		return nil
	})
	return nil
}

// rule is the DNAT of the kubernetes Service (10.96.0.1:443) to the API server for pods on
// the node's bridge; its comment names the node, so a killed run's rule can be found again.
func rule(o Options, host, port string) []string {
	return []string{"PREROUTING", "-i", o.Bridge, "-d", "10.96.0.1/32", "-p", "tcp", "--dport", "443",
		"-j", "DNAT", "--to-destination", host + ":" + port, "-m", "comment", "--comment", "gpupolicy-e2e " + o.Name}
}

// hostsMarker ends the /etc/hosts line a node adds, so only that line is removed again.
const hostsMarker = "# gpupolicy-e2e real node"

// addHostsLine maps the node's name to 127.0.0.1 in the host's /etc/hosts: the API server
// reaches a kubelet by its Hostname address first (logs, exec), and this kubelet listens on
// loopback only. The line is removed in Stop.
func (n *Node) addHostsLine() error {
	line := "127.0.0.1 " + n.Name + " " + hostsMarker + "\n"
	f, err := os.OpenFile("/etc/hosts", os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("/etc/hosts: %w", err)
	}
	_, err = f.WriteString(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("/etc/hosts: %w", err)
	}
	n.cleanup = append(n.cleanup, func() error { return removeHostsLines(n.Name) })
	return nil
}

// removeHostsLines drops the lines addHostsLine wrote for name. /etc/hosts is rewritten in
// place (it is often a bind mount that cannot be replaced by a rename).
func removeHostsLines(name string) error {
	b, err := os.ReadFile("/etc/hosts")
	if err != nil {
		return err
	}
	var keep []string
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if strings.HasSuffix(strings.TrimRight(l, "\n"), " "+name+" "+hostsMarker) {
			continue
		}
		keep = append(keep, l)
	}
	if out := strings.Join(keep, ""); out != string(b) {
		return os.WriteFile("/etc/hosts", []byte(out), 0o644)
	}
	return nil
}

// removeStale removes what a killed run of a node with the same name left behind: its
// bridge, its DNAT rule, its /etc/hosts line, its pod cgroups. Nothing else uses them.
func (n *Node) removeStale() {
	_ = exec.Command("ip", "link", "del", n.opts.Bridge).Run()
	// The API server's port differs per run: find the rule by its comment.
	out, _ := exec.Command("iptables", "-t", "nat", "-S", "PREROUTING").Output()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "-A PREROUTING ") && strings.Contains(l, `"gpupolicy-e2e `+n.Name+`"`) {
			args := strings.Fields(strings.ReplaceAll(strings.TrimPrefix(l, "-A "), `"gpupolicy-e2e `+n.Name+`"`, "gpupolicy-e2e\x00"+n.Name))
			for i, a := range args {
				args[i] = strings.ReplaceAll(a, "\x00", " ")
			}
			_ = exec.Command("iptables", append([]string{"-t", "nat", "-D"}, args...)...).Run()
		}
	}
	_ = removeHostsLines(n.Name)
	_ = n.removePodCgroups()
}

// Stop tears the node down and leaves nothing behind: every process of the namespace
// (containerd, the kubelet, shims, containers) is killed, the node's cgroupRoot with the pod
// cgroups the kubelet created is removed, and the bridge, the iptables rule, the /etc/hosts
// line, the sysctl and the mount points go. Errors are returned joined, after every step ran.
func (n *Node) Stop() error {
	var errs []error
	if n.cmd != nil && n.cmd.Process != nil {
		_ = os.WriteFile(filepath.Join(n.Dir, "stopping"), nil, 0o644)
		_ = n.cmd.Process.Kill() // --kill-child: SIGKILL to the namespace's PID 1, so to all of it
		select {
		case <-n.exited:
		case <-time.After(30 * time.Second):
			errs = append(errs, errors.New("unshare did not exit 30s after SIGKILL"))
		}
		// The kernel kills the namespace's processes asynchronously; wait until none is left.
		deadline := time.Now().Add(30 * time.Second)
		for {
			left := n.nsProcesses()
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("processes of the node still running: %v", left))
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	errs = append(errs, n.removePodCgroups()...)
	for i := len(n.cleanup) - 1; i >= 0; i-- {
		if err := n.cleanup[i](); err != nil {
			errs = append(errs, err)
		}
	}
	n.cleanup = nil
	for i := len(n.created) - 1; i >= 0; i-- {
		if err := os.Remove(n.created[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove mount point %s: %w", n.created[i], err))
		}
	}
	n.created = nil
	if n.lock != nil {
		n.lock.Close() // the machine is free for the next real node
		n.lock = nil
	}
	return errors.Join(errs...)
}

// nsProcesses lists the host PIDs of the node's processes: those in its PID namespace (the
// daemons, shims and hostPID containers; other containers' own namespaces are nested in it
// and die with it).
func (n *Node) nsProcesses() []int {
	if n.pidNS == "" {
		return nil
	}
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ns, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && ns == n.pidNS {
			out = append(out, pid)
		}
	}
	return out
}

// cgroupRoot is the kubelet's cgroupRoot: the node's pods live under it in every hierarchy.
func (n *Node) cgroupRoot() string { return "/gpupolicy-e2e-" + n.Name }

// cgroupHierarchies are the mounted cgroup v1 hierarchies (and the unified one).
func cgroupHierarchies() []string {
	var out []string
	ents, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range ents {
		if e.IsDir() { // cpu,cpuacct-style links point at a directory listed as well
			out = append(out, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	return out
}

// makeCgroupRoot creates the cgroupRoot in every hierarchy (the kubelet requires it to exist);
// a new cpuset gets its parent's CPUs and memory nodes, or no task could join it.
func (n *Node) makeCgroupRoot() error {
	for _, h := range cgroupHierarchies() {
		d := filepath.Join(h, n.cgroupRoot())
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", d, err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil {
					return fmt.Errorf("%s/%s: %w", d, f, err)
				}
			}
		}
	}
	return nil
}

// removePodCgroups removes the node's cgroupRoot with everything the kubelet created under
// it, in every hierarchy, deepest first, once its processes are gone.
func (n *Node) removePodCgroups() []error {
	var errs []error
	for _, h := range cgroupHierarchies() {
		r := filepath.Join(h, n.cgroupRoot())
		var dirs []string
		_ = filepath.WalkDir(r, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			var err error
			for try := 0; try < 50; try++ { // a killed task leaves its cgroup a moment later
				if err = syscall.Rmdir(dirs[i]); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errs
}

// HostPath is where the test reads the node's path p (a path under one of the node's bound
// directories, e.g. /var/lib/gpupolicy/toolkit-status.json).
func (n *Node) HostPath(p string) string { return filepath.Join(n.Dir, "rootfs", p) }

// Socket is containerd's socket as the test reaches it.
func (n *Node) Socket() string { return n.HostPath("/run/containerd/containerd.sock") }

// PodResourcesSocket is the kubelet's pod-resources socket as the test reaches it.
func (n *Node) PodResourcesSocket() string {
	return n.HostPath("/var/lib/kubelet/pod-resources/kubelet.sock")
}

// ImportImage imports a docker-archive into containerd's k8s.io namespace with the ctr of
// the node's containerd version.
func (n *Node) ImportImage(ctx context.Context, tarball string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, n.ctr, "--address", n.Socket(), "-n", "k8s.io", "images", "import", tarball).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s images import %s: %v\n%s", n.ctr, tarball, err, out)
	}
	return nil
}

// Exec runs a command inside the node's mount and PID namespaces (e.g. containerd config dump).
func (n *Node) Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	pid, err := n.initPID()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(pid), "-m", "-p", "--", name}, args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("in node %s: %s %s: %v: %s", n.Name, name, strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// ConfigDump is `containerd config dump` as the node's containerd sees its config.
func (n *Node) ConfigDump(ctx context.Context) (string, error) {
	out, err := n.Exec(ctx, "/usr/bin/containerd", "--config", "/etc/containerd/config.toml", "config", "dump")
	return string(out), err
}

func (n *Node) readPIDNS() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pid, err := n.initPID()
		if err == nil {
			if n.pidNS, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the node's PID namespace: %w\n%s", err, n.Tail("init", 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// initPID is the host PID of the namespace's PID 1 (the init script).
func (n *Node) initPID() (int, error) {
	if n.cmd == nil || n.cmd.Process == nil {
		return 0, errors.New("node not started")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", n.cmd.Process.Pid, n.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("node %s: init process: %w", n.Name, err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("node %s: the namespace's init process is gone", n.Name)
	}
	return strconv.Atoi(f[0])
}

// Launch is one start of a supervised daemon.
type Launch struct {
	PID  int // in the node's PID namespace, as the toolkit stage (hostPID) sees it
	Time time.Time
}

// Starts lists every start of "containerd" or "kubelet" so far.
func (n *Node) Starts(name string) ([]Launch, error) {
	f, err := os.Open(filepath.Join(n.Dir, name+".starts"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Launch
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var pid int
		var t float64
		if _, err := fmt.Sscanf(sc.Text(), "%d %f", &pid, &t); err != nil {
			return nil, fmt.Errorf("%s.starts: %q: %w", name, sc.Text(), err)
		}
		out = append(out, Launch{PID: pid, Time: time.Unix(0, int64(t*1e9))})
	}
	return out, sc.Err()
}

// hostPID finds the host PID of the running process named comm in the node (its last start).
func (n *Node) hostPID(comm string) (int, error) {
	for _, pid := range n.nsProcesses() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err == nil && strings.TrimSpace(string(b)) == comm {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("node %s: no %s process running", n.Name, comm)
}

// Signal sends sig to the node's process named comm ("kubelet", "containerd").
func (n *Node) Signal(comm string, sig syscall.Signal) error {
	pid, err := n.hostPID(comm)
	if err != nil {
		return err
	}
	return syscall.Kill(pid, sig)
}

// Restart stops the node's comm ("kubelet", "containerd") with SIGTERM and waits until its
// supervisor started it again; it returns when the new process was started.
func (n *Node) Restart(ctx context.Context, comm string) (Launch, error) {
	before, err := n.Starts(comm)
	if err != nil {
		return Launch{}, err
	}
	if err := n.Signal(comm, syscall.SIGTERM); err != nil {
		return Launch{}, err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		now, err := n.Starts(comm)
		if err != nil {
			return Launch{}, err
		}
		if len(now) > len(before) {
			return now[len(now)-1], nil
		}
		if time.Now().After(deadline) {
			return Launch{}, fmt.Errorf("node %s: %s not started again 1m after SIGTERM\n%s", n.Name, comm, n.Tail(comm, 20))
		}
		select {
		case <-ctx.Done():
			return Launch{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// RestartKubelet restarts the kubelet (SIGTERM; the supervisor starts it again).
func (n *Node) RestartKubelet(ctx context.Context) (Launch, error) { return n.Restart(ctx, "kubelet") }

// Log is the whole log of "containerd", "kubelet" or "init".
func (n *Node) Log(name string) string {
	b, _ := os.ReadFile(filepath.Join(n.LogDir, name+".log"))
	return string(b)
}

// Tail is the last lines of a log, for failure messages.
func (n *Node) Tail(name string, lines int) string {
	l := strings.Split(strings.TrimRight(n.Log(name), "\n"), "\n")
	return fmt.Sprintf("last lines of %s/%s.log:\n  %s", n.LogDir, name, strings.Join(l[max(0, len(l)-lines):], "\n  "))
}

func (n *Node) waitFile(ctx context.Context, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(filepath.Join(n.Dir, name)); err == nil {
			return nil
		}
		select {
		case <-n.exited:
			return fmt.Errorf("the node's namespace exited (%v)\n%s", n.waitErr, n.Tail("init", 20))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not there after %s", name, timeout)
		}
	}
}

// PIDOf is the PID, in the node's namespace (as the start log and the toolkit stage see it),
// of the node's running process named comm.
func (n *Node) PIDOf(comm string) (int, error) {
	hp, err := n.hostPID(comm)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", hp))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "NSpid:" {
			return strconv.Atoi(f[len(f)-1])
		}
	}
	return 0, fmt.Errorf("no NSpid in /proc/%d/status", hp)
}
