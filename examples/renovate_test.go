package examples

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/internal/peer"
)

// RenovateVersion is the Renovate the preset is verified with (the Makefile pins the same).
const RenovateVersion = "44.94.0"

const renovatePreset = "renovate/renovate.json5"

// renovate returns Renovate's bin directory (renovate, renovate-config-validator and the Node 24
// they need): $RENOVATE's directory, else where `make tools` installs it.
func renovate(t *testing.T) string {
	t.Helper()
	return filepath.Dir(peer.Tool(t, "RENOVATE", "renovate", RenovateVersion, "node_modules/.bin/renovate"))
}

func runRenovate(t *testing.T, dir string, env []string, name string, args ...string) ([]byte, error) {
	t.Helper()
	bin := renovate(t)
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append(env, "PATH="+bin+":"+os.Getenv("PATH"))...)
	return cmd.CombinedOutput()
}

// presetMatchString is the preset's one regex, read from the file (its comments are whole
// lines, so the rest is JSON).
func presetMatchString(t *testing.T) *regexp.Regexp {
	t.Helper()
	b, err := os.ReadFile(renovatePreset)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for l := range strings.Lines(string(b)) {
		if !strings.HasPrefix(strings.TrimSpace(l), "//") {
			lines = append(lines, l)
		}
	}
	var preset struct {
		CustomManagers []struct {
			MatchStrings []string `json:"matchStrings"`
		} `json:"customManagers"`
	}
	if err := json.Unmarshal([]byte(strings.Join(lines, "")), &preset); err != nil {
		t.Fatalf("%s: %v", renovatePreset, err)
	}
	if len(preset.CustomManagers) != 1 || len(preset.CustomManagers[0].MatchStrings) != 1 {
		t.Fatalf("%s: this test knows one custom manager with one matchString", renovatePreset)
	}
	return regexp.MustCompile(preset.CustomManagers[0].MatchStrings[0])
}

// TestRenovateRegex is the preset's regex on the shapes a version takes in a fleet repository:
// each row is a text and the dependency Renovate must read from it (none: nothing).
func TestRenovateRegex(t *testing.T) {
	re := presetMatchString(t)
	const driver = "# renovate: datasource=docker depName=nvcr.io/nvidia/driver extractVersion=^(?<version>\\d+\\.\\d+\\.\\d+)-ubuntu24\\.04$\n"
	for _, tc := range []struct {
		name, text                          string
		depName, value, extract, versioning string
	}{
		{"quoted", driver + `    version: "580.95.05"`, "nvcr.io/nvidia/driver", "580.95.05", `^(?<version>\d+\.\d+\.\d+)-ubuntu24\.04$`, ""},
		{"single-quoted", driver + `    version: '580.95.05'`, "nvcr.io/nvidia/driver", "580.95.05", `^(?<version>\d+\.\d+\.\d+)-ubuntu24\.04$`, ""},
		{"plain", driver + `    version: 580.95.05`, "nvcr.io/nvidia/driver", "580.95.05", `^(?<version>\d+\.\d+\.\d+)-ubuntu24\.04$`, ""},
		{"inside a patch's literal block", "        " + driver + `        version: "580.105.08"`, "nvcr.io/nvidia/driver", "580.105.08", `^(?<version>\d+\.\d+\.\d+)-ubuntu24\.04$`, ""},
		{"a list item", "# renovate: datasource=docker depName=nvcr.io/nvidia/k8s/container-toolkit\n- version: v1.18.0", "nvcr.io/nvidia/k8s/container-toolkit", "v1.18.0", "", ""},
		{"with versioning", "# renovate: datasource=github-releases depName=NVIDIA/nvidia-container-toolkit versioning=semver\n  version: \"1.18.0\"", "NVIDIA/nvidia-container-toolkit", "1.18.0", "", "semver"},
		{"a comment further up", driver + "    source: container\n    version: \"580.95.05\"", "nvcr.io/nvidia/driver", "", "", ""},
		{"no comment", `    version: "580.95.05"`, "", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := re.FindStringSubmatch(tc.text)
			got := func(g string) string {
				if m == nil {
					return ""
				}
				return m[re.SubexpIndex(g)]
			}
			if tc.value == "" {
				if m != nil {
					t.Errorf("read %q from %q; want nothing", got("currentValue"), tc.text)
				}
				return
			}
			if got("depName") != tc.depName || got("currentValue") != tc.value || got("extractVersion") != tc.extract || got("versioning") != tc.versioning {
				t.Errorf("read depName %q, currentValue %q, extractVersion %q, versioning %q; want %q, %q, %q, %q",
					got("depName"), got("currentValue"), got("extractVersion"), got("versioning"), tc.depName, tc.value, tc.extract, tc.versioning)
			}
		})
	}
}

// fleetVersions are the versions of examples/fleet Renovate keeps current, by file.
var fleetVersions = []string{
	"base/gpupolicy.yaml nvcr.io/nvidia/driver 580.95.05",
	"base/gpupolicy.yaml nvcr.io/nvidia/k8s/container-toolkit 1.18.0",
	"clusters/prod-us/policy/kustomization.yaml nvcr.io/nvidia/driver 580.105.08",
}

// TestFleetVersionsMarked: every driver and toolkit version in examples/fleet carries the
// comment the preset reads, so Renovate leaves none of them behind.
func TestFleetVersionsMarked(t *testing.T) {
	re := presetMatchString(t)
	var found, unmarked []string
	err := filepath.WalkDir("fleet", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") || strings.Contains(p, "rendered") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("fleet", p)
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			found = append(found, rel+" "+m[re.SubexpIndex("depName")]+" "+m[re.SubexpIndex("currentValue")])
		}
		// Every `version:` under driver: or toolkit: must be one of them.
		var parent string
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "driver:" || line == "toolkit:" || line == "cuda:" {
				parent = line
			}
			if v, ok := strings.CutPrefix(line, "version: "); ok && (parent == "driver:" || parent == "toolkit:") {
				v = strings.Trim(v, `"`)
				if !slices.ContainsFunc(found, func(f string) bool { return strings.HasPrefix(f, rel+" ") && strings.HasSuffix(f, " "+v) }) {
					unmarked = append(unmarked, rel+": "+parent+" version "+v)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(found)
	if !slices.Equal(found, fleetVersions) {
		t.Errorf("the preset reads %q from examples/fleet; want %q", found, fleetVersions)
	}
	if len(unmarked) > 0 {
		t.Errorf("versions without a # renovate: comment: %v", unmarked)
	}
}

// TestRenovatePresetValid runs Renovate's own validator on the preset (strict: a warning or a
// needed migration fails), and on a copy with a misspelt option, which must fail.
func TestRenovatePresetValid(t *testing.T) {
	abs, _ := filepath.Abs(renovatePreset)
	if out, err := runRenovate(t, ".", nil, "renovate-config-validator", "--strict", "--no-global", abs); err != nil {
		t.Fatalf("renovate-config-validator %s: %v\n%s", renovatePreset, err, out)
	}
	b, _ := os.ReadFile(renovatePreset)
	bad := filepath.Join(t.TempDir(), "renovate.json5")
	if err := os.WriteFile(bad, bytes.Replace(b, []byte(`"groupSlug"`), []byte(`"groupSlugg"`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runRenovate(t, ".", nil, "renovate-config-validator", "--strict", "--no-global", bad); err == nil {
		t.Errorf("the validator accepts a preset with groupSlugg:\n%s", out)
	}
}

// TestRenovateExtractsFleet runs Renovate itself, offline (the local platform, extraction
// only: no registry is asked for versions), on a repository holding examples/fleet with the
// preset as its config, and reads what its regex manager extracted from the JSON log.
func TestRenovateExtractsFleet(t *testing.T) {
	repo := t.TempDir()
	for _, d := range []string{"base", "clusters"} {
		if err := os.CopyFS(filepath.Join(repo, d), os.DirFS(filepath.Join("fleet", d))); err != nil {
			t.Fatal(err)
		}
	}
	preset, _ := os.ReadFile(renovatePreset)
	if err := os.WriteFile(filepath.Join(repo, "renovate.json5"), preset, 0o644); err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-c", "user.email=t@example.com", "-c", "user.name=t"}, args...)...)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-qm", "fleet")
	out, err := runRenovate(t, repo, []string{"LOG_LEVEL=debug", "LOG_FORMAT=json", "RENOVATE_BASE_DIR=" + t.TempDir()},
		"renovate", "--platform=local", "--dry-run=extract", "--onboarding=false")
	if err != nil {
		t.Fatalf("renovate: %v\n%s", err, out)
	}
	var found []string
	for line := range bytes.Lines(out) {
		var entry struct {
			Msg          string `json:"msg"`
			PackageFiles map[string][]struct {
				PackageFile string `json:"packageFile"`
				Deps        []struct {
					DepName, CurrentValue, ExtractVersion string
				} `json:"deps"`
			} `json:"packageFiles"`
		}
		if json.Unmarshal(line, &entry) != nil || entry.Msg != "Extracted dependencies" {
			continue
		}
		for _, pf := range entry.PackageFiles["regex"] {
			for _, d := range pf.Deps {
				found = append(found, pf.PackageFile+" "+d.DepName+" "+d.CurrentValue)
				if d.DepName == "nvcr.io/nvidia/driver" && !strings.HasPrefix(d.ExtractVersion, "^(?<version>") {
					t.Errorf("%s: the driver's extractVersion is %q", pf.PackageFile, d.ExtractVersion)
				}
			}
		}
	}
	slices.Sort(found)
	if !slices.Equal(found, fleetVersions) {
		t.Errorf("Renovate extracted %q; want %q\n%s", found, fleetVersions, out)
	}
}
