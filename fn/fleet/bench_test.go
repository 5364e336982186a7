package fleet

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkFleetDiff100 compares two fleets of 100 clusters (the four committed clusters of
// examples/fleet, 25 times each; on the new side every other cluster is another cluster's
// output, so half of them change): load, compare, Markdown. BENCHMARKS.md has the numbers.
func BenchmarkFleetDiff100(b *testing.B) {
	clusters := []string{"airgap", "dev", "prod-eu", "prod-us"}
	data := map[string][]byte{}
	for _, c := range clusters {
		d, err := os.ReadFile(filepath.Join("..", "..", "examples", "fleet", "rendered", c+".yaml"))
		if err != nil {
			b.Fatal(err)
		}
		data[c] = d
	}
	oldDir, newDir := b.TempDir(), b.TempDir()
	for i := range 100 {
		c := clusters[i%4]
		next := c
		if i%2 == 1 {
			next = clusters[(i+2)%4]
		}
		name := fmt.Sprintf("cluster-%03d.yaml", i)
		if err := os.WriteFile(filepath.Join(oldDir, name), data[c], 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(newDir, name), data[next], 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		o, err := Load(oldDir)
		if err != nil {
			b.Fatal(err)
		}
		n, err := Load(newDir)
		if err != nil {
			b.Fatal(err)
		}
		r, err := Compare(o, n)
		if err != nil {
			b.Fatal(err)
		}
		if len(r.Markdown()) == 0 {
			b.Fatal("empty report")
		}
	}
}
