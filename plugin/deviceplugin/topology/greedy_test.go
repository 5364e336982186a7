package topology

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// A node with more GPUs than the exhaustive search covers gets a greedy answer: the right
// size, must-include first, no repeats, and a score near the exhaustive optimum.
func TestBestGreedyOnLargeNodes(t *testing.T) {
	const n = 24
	r := rand.New(rand.NewPCG(1, 2))
	g := &Graph{score: square[int](n), present: make([]bool, n)}
	for i := range n {
		g.present[i] = true
		for j := i + 1; j < n; j++ {
			s := r.IntN(100)
			g.score[i][j], g.score[j][i] = s, s
		}
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	if binomial(n, 12) <= maxExhaustive {
		t.Fatal("test does not reach the greedy path")
	}
	got := g.Best(all, []int{5}, 12)
	if len(got) != 12 || got[0] != 5 {
		t.Fatalf("Best = %v", got)
	}
	seen := slices.Clone(got)
	slices.Sort(seen)
	if len(slices.Compact(seen)) != 12 {
		t.Fatalf("repeats in %v", got)
	}
	// On a size the exhaustive search covers, greedy is within 10% of the optimum here.
	cand := slices.DeleteFunc(slices.Clone(all[:14]), func(i int) bool { return i == 5 })
	best := g.exhaustive([]int{5}, cand, 3)
	greedy := g.greedy([]int{5}, cand, 3)
	if g.Score(greedy)*10 < g.Score(best)*9 {
		t.Errorf("greedy %v scores %d, optimum %v scores %d", greedy, g.Score(greedy), best, g.Score(best))
	}
	if pair := g.greedy(nil, all[:6], 2); len(pair) != 2 {
		t.Errorf("greedy pair %v", pair)
	}
}
