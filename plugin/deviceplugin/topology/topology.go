// Package topology picks the GPUs a container should get so that they talk fastest: it reads
// NVLink and PCIe topology from NVML once, scores every GPU pair, and chooses the set with the
// best total score. It is the project's own take on NVIDIA's go-gpuallocator (not available
// from the module proxy), best effort by design: a GPU it cannot describe scores as "across
// the system" instead of failing the node.
package topology

import (
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/devices"
)

// Pair scores. One NVLink outweighs any PCIe path, so NVLink-connected GPUs always win; among
// equal NVLink counts the closer PCIe path wins (same switch over same NUMA node over system).
const (
	scorePerNVLink = 100
)

var pcieScore = map[nvml.GpuTopologyLevel]int{
	nvml.TOPOLOGY_INTERNAL:   50,
	nvml.TOPOLOGY_SINGLE:     40,
	nvml.TOPOLOGY_MULTIPLE:   30,
	nvml.TOPOLOGY_HOSTBRIDGE: 20,
	nvml.TOPOLOGY_NODE:       10,
	nvml.TOPOLOGY_SYSTEM:     0,
}

// Graph holds the pair scores of a node's GPUs, indexed by GPU index.
type Graph struct {
	// NVLinks[i][j] is the number of NVLinks between GPU i and j, direct or through NVSwitches.
	NVLinks [][]int
	// PCIe[i][j] is the common PCIe ancestor level of GPU i and j.
	PCIe    [][]nvml.GpuTopologyLevel
	score   [][]int
	present []bool
}

// Build reads the topology of gpus from NVML. The graph is indexed by NVML GPU index; a GPU
// missing from gpus (skipped at enumeration) has no links and is never chosen.
func Build(gpus []devices.GPU) *Graph {
	n := 0
	for _, gpu := range gpus {
		n = max(n, gpu.Index+1)
	}
	g := &Graph{NVLinks: square[int](n), PCIe: square[nvml.GpuTopologyLevel](n), score: square[int](n), present: make([]bool, n)}
	byBus := map[string]int{}
	for _, gpu := range gpus {
		g.present[gpu.Index] = true
		if gpu.BusID != "" {
			byBus[gpu.BusID] = gpu.Index
		}
	}
	direct := square[int](n)
	viaSwitch := make([]map[string]int, n)
	for _, gpu := range gpus {
		viaSwitch[gpu.Index] = readLinks(gpu, byBus, direct[gpu.Index])
	}
	for _, a := range gpus {
		i := a.Index
		for _, b := range gpus {
			j := b.Index
			if i == j {
				g.PCIe[i][j] = nvml.TOPOLOGY_INTERNAL
				continue
			}
			links := direct[i][j]
			for sw, c := range viaSwitch[i] {
				links += min(c, viaSwitch[j][sw])
			}
			g.NVLinks[i][j] = links
			level, ret := a.Handle.GetTopologyCommonAncestor(b.Handle)
			if ret != nvml.SUCCESS {
				level = nvml.TOPOLOGY_SYSTEM
			}
			g.PCIe[i][j] = level
			g.score[i][j] = links*scorePerNVLink + pcieScore[level]
		}
	}
	return g
}

// readLinks counts gpu's active NVLinks: to other GPUs into direct[j], to anything else (an
// NVSwitch) by the remote's bus id in the returned map. GPUs linked to the same switch talk
// through it, up to the smaller of their link counts to it.
func readLinks(gpu devices.GPU, byBus map[string]int, direct []int) map[string]int {
	switches := map[string]int{}
	for l := range nvml.NVLINK_MAX_LINKS {
		state, ret := gpu.Handle.GetNvLinkState(l)
		if ret != nvml.SUCCESS || state != nvml.FEATURE_ENABLED {
			continue
		}
		pci, ret := gpu.Handle.GetNvLinkRemotePciInfo(l)
		if ret != nvml.SUCCESS {
			continue
		}
		bus := devices.SysfsBusID(pci)
		if j, ok := byBus[bus]; ok && j != gpu.Index {
			direct[j]++
			continue
		}
		switches[bus]++
	}
	return switches
}

func square[T any](n int) [][]T {
	m := make([][]T, n)
	for i := range m {
		m[i] = make([]T, n)
	}
	return m
}

// Score is the sum of pair scores within set (GPU indices).
func (g *Graph) Score(set []int) int {
	s := 0
	for a := range set {
		for b := a + 1; b < len(set); b++ {
			s += g.score[set[a]][set[b]]
		}
	}
	return s
}

// maxExhaustive bounds the number of candidate sets scored one by one; beyond it the choice
// is greedy (a node with more than ~16 GPUs).
const maxExhaustive = 50000

// Best returns size GPUs: all of must, plus those of avail that give the highest Score. Ties go
// to lower GPU indices, so the answer is deterministic. Fewer are returned when avail is short.
func (g *Graph) Best(avail, must []int, size int) []int {
	chosen := append([]int(nil), must...)
	in := map[int]bool{}
	for _, m := range must {
		in[m] = true
	}
	var cand []int
	for _, a := range avail {
		if !in[a] && a >= 0 && a < len(g.present) && g.present[a] {
			in[a] = true
			cand = append(cand, a)
		}
	}
	need := size - len(chosen)
	if need <= 0 {
		return chosen
	}
	if need >= len(cand) {
		return append(chosen, cand...)
	}
	slices.Sort(cand)
	if binomial(len(cand), need) <= maxExhaustive {
		return g.exhaustive(chosen, cand, need)
	}
	return g.greedy(chosen, cand, need)
}

func (g *Graph) exhaustive(chosen, cand []int, need int) []int {
	best, bestScore := []int(nil), -1
	pick := make([]int, 0, len(chosen)+need)
	var walk func(start int)
	walk = func(start int) {
		if len(pick)-len(chosen) == need {
			if s := g.Score(pick); s > bestScore {
				best, bestScore = append(best[:0], pick...), s
			}
			return
		}
		for k := start; k <= len(cand)-(need-(len(pick)-len(chosen))); k++ {
			pick = append(pick, cand[k])
			walk(k + 1)
			pick = pick[:len(pick)-1]
		}
	}
	pick = append(pick, chosen...)
	walk(0)
	return best
}

// greedy starts from must (or the best pair when must is empty) and adds the GPU that adds
// the most score until size is reached.
func (g *Graph) greedy(chosen, cand []int, need int) []int {
	used := map[int]bool{}
	if len(chosen) == 0 && need >= 2 {
		bi, bj, bs := cand[0], cand[1], -1
		for a := range cand {
			for b := a + 1; b < len(cand); b++ {
				if s := g.score[cand[a]][cand[b]]; s > bs {
					bi, bj, bs = cand[a], cand[b], s
				}
			}
		}
		chosen = append(chosen, bi, bj)
		used[bi], used[bj] = true, true
		need -= 2
	}
	for ; need > 0; need-- {
		bestK, bestGain := -1, -1
		for _, c := range cand {
			if used[c] {
				continue
			}
			gain := 0
			for _, x := range chosen {
				gain += g.score[x][c]
			}
			if gain > bestGain {
				bestK, bestGain = c, gain
			}
		}
		chosen = append(chosen, bestK)
		used[bestK] = true
	}
	return chosen
}

func binomial(n, k int) int {
	r := 1
	for i := 1; i <= k; i++ {
		r = r * (n - k + i) / i
		if r > maxExhaustive {
			return r
		}
	}
	return r
}
