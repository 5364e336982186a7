package mig

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// Every profile of every model fits one GPU at its instance count, and one more does not.
func TestEveryProfileFitsAtItsCount(t *testing.T) {
	for _, name := range ProductNames() {
		p := Products[name]
		for _, pr := range p.Profiles {
			got, err := Fit(p.Profiles, map[string]int{pr.Name: pr.Max})
			if err != nil {
				t.Errorf("%s: %d × %s: %v", name, pr.Max, pr.Name, err)
				continue
			}
			if len(got) != pr.Max {
				t.Errorf("%s: %d × %s placed %d", name, pr.Max, pr.Name, len(got))
			}
			if _, err := Fit(p.Profiles, map[string]int{pr.Name: pr.Max + 1}); err == nil {
				t.Errorf("%s: %d × %s fits, but the model holds %d", name, pr.Max+1, pr.Name, pr.Max)
			}
		}
	}
}

// The layouts NVIDIA's mig-parted example config calls "balanced" and the two-size splits
// fit, each instance at a start of its profile, none overlapping.
func TestFitPlacesWithoutOverlap(t *testing.T) {
	p := Products["NVIDIA-A100-SXM4-40GB"]
	for _, counts := range []map[string]int{
		{"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
		{"4g.20gb": 1, "3g.20gb": 1},
		{"2g.10gb": 3, "1g.5gb": 1},
		{"1g.10gb": 2, "1g.5gb": 3},
		{"1g.5gb+me": 1, "1g.5gb": 6},
	} {
		got, err := Fit(p.Profiles, counts)
		if err != nil {
			t.Errorf("%v: %v", counts, err)
			continue
		}
		used := 0
		for _, pl := range got {
			mask := (1<<pl.Size - 1) << pl.Start
			if used&mask != 0 || pl.Start+pl.Size > MemorySlices {
				t.Errorf("%v: %+v overlaps or leaves the GPU (%v)", counts, pl, got)
			}
			used |= mask
		}
	}
}

func TestFitRefusesWithTheReason(t *testing.T) {
	p := Products["NVIDIA-H100-80GB-HBM3"]
	for counts, want := range map[*map[string]int]string{
		{"3g.40gb": 3}:               "more than the 2 instances of 3g.40gb",
		{"4g.40gb": 1, "2g.20gb": 2}: "takes 8 compute slices",
		{"3g.40gb": 2, "1g.10gb": 1}: "takes 9 memory slices",
		{"1g.5gb": 1}:                "profile 1g.5gb does not exist on this GPU",
		{"7g.80gb": 1, "1g.10gb": 1}: "takes 8 compute slices",
	} {
		_, err := Fit(p.Profiles, *counts)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: got %v, want %q", *counts, err, want)
		}
	}
}

func TestParseProfile(t *testing.T) {
	for in, want := range map[string]ProfileName{
		"1g.10gb":        {1, 10, ""},
		"1g.10gb+me":     {1, 10, "+me"},
		"7g.141gb":       {7, 141, ""},
		"2g.24gb-me":     {2, 24, "-me"},
		"1g.5gb+gfx":     {1, 5, "+gfx"},
		"3g.71gb":        {3, 71, ""},
		"4g.90gb":        {4, 90, ""},
		"1g.23gb+me.all": {1, 23, "+me.all"},
	} {
		got, err := ParseProfile(in)
		if err != nil || got != want {
			t.Errorf("%s: got %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "1g10gb", "1g.10GB", "0g.10gb", "5g.50gb", "8g.80gb", "1c.2g.10gb", "1g.10gb+xx", "mig-1g.10gb"} {
		if _, err := ParseProfile(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestDevicesJSON(t *testing.T) {
	for in, want := range map[string]Devices{`"all"`: {All: true}, `[0,2]`: {Indexes: []int{0, 2}}} {
		var d Devices
		if err := json.Unmarshal([]byte(in), &d); err != nil {
			t.Fatal(err)
		}
		if d.All != want.All || len(d.Indexes) != len(want.Indexes) {
			t.Errorf("%s: %+v", in, d)
		}
		out, _ := json.Marshal(d)
		if string(out) != in {
			t.Errorf("%s round-trips to %s", in, out)
		}
	}
	var d Devices
	if err := json.Unmarshal([]byte(`"some"`), &d); err == nil {
		t.Error(`"some" accepted`)
	}
}

// The reference's table of models lists every model and profile of Products.
func TestReferenceListsTheTable(t *testing.T) {
	doc, err := os.ReadFile("../../fn/api/v1alpha1/README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range ProductNames() {
		p := Products[name]
		line := ""
		for _, l := range strings.Split(string(doc), "\n") {
			if strings.HasPrefix(l, "| ") && strings.Contains(l, "`"+name+"`") {
				line = l
			}
		}
		if line == "" {
			t.Errorf("fn/api/v1alpha1/README.md (MIG layouts) does not list %s", name)
			continue
		}
		for _, pr := range p.Profiles {
			if !strings.Contains(line, fmt.Sprintf("%s (%d)", pr.Name, pr.Max)) {
				t.Errorf("README row of %s lacks %s (%d)", name, pr.Name, pr.Max)
			}
		}
	}
}
