package realnode

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// footprintGoal is issue 27's target for every node program of the stack on one node together.
const footprintGoal = 150 << 20

// memory is a container's processes' memory, summed: resident (VmRSS), of it private
// anonymous (RssAnon) and file-backed (RssFile), and proportional (Pss: a shared page counted
// once across the processes that map it; five containers run the one gpu-node-agent binary, so
// the sum of their VmRSS counts its text five times, the sum of Pss once).
type memory struct{ rss, anon, file, pss int64 }

func (m *memory) add(o memory) { m.rss += o.rss; m.anon += o.anon; m.file += o.file; m.pss += o.pss }

func (m memory) String() string {
	mib := func(b int64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) }
	return fmt.Sprintf("%s MiB (anon %s, file %s), PSS %s MiB", mib(m.rss), mib(m.anon), mib(m.file), mib(m.pss))
}

// recordFootprint measures the stack's steady-state memory on the node: every process of every
// container of the stack's pods, found by the container id in /proc/PID/cgroup inside the node's
// PID namespace, summed per container and in all, into the timing table (BENCHMARKS.md takes it
// from there). The node programs run the gpupolicy image's binaries with the dgxa100 NVML mock
// (8 GPUs); with the real NVML each process that loads it adds NVML's own allocation
// (BENCHMARKS.md, the H200 run).
func (s *nodeState) recordFootprint(timing *timingFile) {
	t := s.t
	t.Helper()
	ctx := context.Background()
	pods, err := env.cs.CoreV1().Pods(s.r.ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + s.n.Name})
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	var total memory
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			cid := strings.TrimPrefix(c.ContainerID, "containerd://")
			if cid == "" || c.State.Running == nil {
				continue
			}
			m, err := s.containerMemory(ctx, cid)
			if err != nil {
				t.Errorf("memory of %s/%s: %v", p.Name, c.Name, err)
				continue
			}
			total.add(m)
			owner := p.Name
			if ref := metav1.GetControllerOf(&p); ref != nil {
				owner = ref.Name
			}
			rows = append(rows, fmt.Sprintf("| containerd %s | steady-state RSS, %s/%s | %s |", s.c.containerd, owner, c.Name, m))
		}
	}
	slices.Sort(rows)
	for _, r := range rows {
		timing.add(r)
	}
	timing.add(fmt.Sprintf("| containerd %s | steady-state RSS, the whole stack (%d containers) | %s |", s.c.containerd, len(rows), total))
	t.Logf("containerd %s: the stack's steady-state memory on the node, %d containers: RSS %s", s.c.containerd, len(rows), total)
	if total.pss > footprintGoal {
		t.Logf("PSS over the %d MiB goal (issue 27)", footprintGoal>>20)
	}
}

// containerMemory sums the memory of the processes of container cid on the node.
func (s *nodeState) containerMemory(ctx context.Context, cid string) (memory, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := s.n.Exec(ctx, "sh", "-c", `for f in /proc/[0-9]*/cgroup; do if grep -qF "$1" "$f" 2>/dev/null; then d=${f%cgroup}; grep -E '^(VmRSS|RssAnon|RssFile):' "${d}status" 2>/dev/null; grep '^Pss:' "${d}smaps_rollup" 2>/dev/null; fi; done`, "sh", cid)
	if err != nil {
		return memory{}, err
	}
	var m memory
	fields := map[string]*int64{"VmRSS:": &m.rss, "RssAnon:": &m.anon, "RssFile:": &m.file, "Pss:": &m.pss}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != "kB" || fields[f[0]] == nil {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return memory{}, fmt.Errorf("line %q: %w", line, err)
		}
		*fields[f[0]] += kb << 10
	}
	if m.rss == 0 {
		return memory{}, fmt.Errorf("no process of container %s found in the node's /proc", cid)
	}
	return m, nil
}
