package examples

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gpupolicy/gpupolicy/internal/peer"
)

// KustomizeVersion is the kustomize the examples are verified with (the Makefile pins the same).
const KustomizeVersion = "v5.8.2"

// kustomize returns the kustomize binary: $KUSTOMIZE, else where `make tools` installs it. In CI
// (CI set) a missing kustomize fails the test; elsewhere it skips, so `go test` works on a
// machine that never ran `make tools`.
func kustomize(t testing.TB) string {
	t.Helper()
	return peer.Tool(t, "KUSTOMIZE", "kustomize", KustomizeVersion, "kustomize")
}

var (
	buildOnce sync.Once
	fnPath    string
	buildErr  error
	buildOut  []byte
	buildDir  string
)

// gpupolicyFn builds bin/gpupolicy-fn from this checkout into a temporary directory once per
// test binary, so the tests exercise the code under test, never a stale bin/.
func gpupolicyFn(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "gpupolicy-fn-")
		if buildErr != nil {
			return
		}
		fnPath = filepath.Join(buildDir, "gpupolicy-fn")
		// Static, as make fn and the image build it: the process benchmarks measure that binary.
		cmd := exec.Command("go", "build", "-trimpath", "-o", fnPath, "github.com/gpupolicy/gpupolicy/fn")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("go build ./fn: %v\n%s", buildErr, buildOut)
	}
	return fnPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}
