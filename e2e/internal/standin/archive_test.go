package standin

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// probeSource prints what the image's config and layer should have given it.
const probeSource = `package main

import (
	"fmt"
	"os"
)

func main() {
	st, err := os.Stat("/tmp")
	if err != nil {
		panic(err)
	}
	scratch, err := os.Stat("/scratch")
	if err != nil {
		panic(err)
	}
	cwd, _ := os.Getwd()
	data, _ := os.ReadFile("/etc/probe/data")
	fmt.Printf("tmp=%v scratch=%v cwd=%s uid=%d args=%q data=%q greeting=%s\n", st.Mode(), scratch.Mode(), cwd, os.Getuid(), os.Args, data, os.Getenv("GREETING"))
}
`

// buildProbe builds probeSource as a static binary.
func buildProbe(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(probeSource), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "probe"), src)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "probe"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func probeImage(bin []byte) Image {
	return Image{
		Ref: "gpupolicy.dev/e2e/probe:v1",
		Files: map[string]File{
			"/usr/local/bin/probe": {Content: bin, Mode: 0o755},
			"/tmp":                 Dir(0o1777),
			"/scratch":             Dir(0o777 | os.ModeSticky),
			"/etc/probe/data":      {Content: []byte("from the layer"), Mode: 0o644},
			"/work":                Dir(0o755),
		},
		Entrypoint: []string{"/usr/local/bin/probe"},
		Cmd:        []string{"from-cmd"},
		Env:        []string{"GREETING=hello", "PATH=/usr/local/bin:/usr/bin:/bin"},
		User:       "65534",
		WorkingDir: "/work",
	}
}

// TestArchiveImportsAndRuns imports an archive into a real containerd (1.6 and 2.x) and runs it: the
// ref is listed, and the container sees the layer's files and modes and the config's
// entrypoint, cmd, env, user and working directory.
func TestArchiveImportsAndRuns(t *testing.T) {
	needNode(t)
	img := probeImage(buildProbe(t))
	tarball := filepath.Join(t.TempDir(), "probe.tar")
	if err := WriteArchive(tarball, img); err != nil {
		t.Fatal(err)
	}
	forEachContainerd(t, func(t *testing.T, start func(...string) *containerd) {
		c := start()
		c.importImage(t, tarball, img.Ref)
		out := c.ctr(t, "run", "--rm", img.Ref, "probe")
		want := `tmp=dtrwxrwxrwx scratch=dtrwxrwxrwx cwd=/work uid=65534 args=["/usr/local/bin/probe" "from-cmd"] data="from the layer" greeting=hello`
		if strings.TrimSpace(out) != want {
			t.Errorf("container printed\n%s\nwant\n%s", out, want)
		}
	})
}

// TestArchiveIsDeterministic: the same image gives the same bytes, so digests are stable and
// a second import is a no-op; a different file gives different bytes.
func TestArchiveIsDeterministic(t *testing.T) {
	dir := t.TempDir()
	img := probeImage([]byte("not a real binary"))
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	for _, p := range []string{a, b} {
		if err := WriteArchive(p, img); err != nil {
			t.Fatal(err)
		}
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb) {
		t.Error("two archives of the same image differ")
	}
	img.Files["/etc/probe/data"] = File{Content: []byte("changed"), Mode: 0o644}
	if err := WriteArchive(b, img); err != nil {
		t.Fatal(err)
	}
	if bb, _ = os.ReadFile(b); bytes.Equal(ab, bb) {
		t.Error("changing a file did not change the archive")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}

// TestArchiveRefusesBadImages names the field to fix.
func TestArchiveRefusesBadImages(t *testing.T) {
	ok := probeImage([]byte("x"))
	for name, tc := range map[string]struct {
		change func(*Image)
		want   string
	}{
		"no ref":         {func(i *Image) { i.Ref = "" }, "Ref"},
		"nothing to run": {func(i *Image) { i.Entrypoint, i.Cmd = nil, nil }, "Entrypoint"},
		"no files":       {func(i *Image) { i.Files = nil }, "no Files"},
		"relative path":  {func(i *Image) { i.Files["probe"] = File{} }, `Files["probe"]`},
		"unclean path":   {func(i *Image) { i.Files["/a/../b"] = File{} }, `Files["/a/../b"]`},
		"file as parent": {func(i *Image) { i.Files["/etc/probe/data/x"] = File{} }, "is not a directory"},
		"device":         {func(i *Image) { i.Files["/dev/x"] = File{Mode: os.ModeDevice} }, "only regular files"},
	} {
		t.Run(name, func(t *testing.T) {
			img := ok
			img.Files = map[string]File{}
			for k, v := range ok.Files {
				img.Files[k] = v
			}
			tc.change(&img)
			p := filepath.Join(t.TempDir(), "x.tar")
			err := WriteArchive(p, img)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
			if _, serr := os.Stat(p); serr == nil {
				t.Error("a refused image still wrote an archive")
			}
		})
	}
}
