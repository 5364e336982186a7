package config

import (
	"strings"
	"testing"
)

func TestParseDriverVersion(t *testing.T) {
	for in, want := range map[string]string{
		"580.95.05":  "580.95.05",
		"580.95.5":   "580.95.05", // the same version, spelt without the patch's leading zero
		"570.86.15":  "570.86.15",
		"535.288.01": "535.288.01",
		"390.144":    "390.144",
		"580.095.05": "580.95.05",
		"1000.1.00":  "1000.1.00",
	} {
		v, err := ParseDriverVersion(in)
		if err != nil || v.String() != want {
			t.Errorf("ParseDriverVersion(%q) = %v, %v; want %s", in, v, err, want)
		}
	}
	for _, in := range []string{"", "580", "580.", "580.95.", ".95.05", "580.95.05.1", "580.95.005", "580.9595.05",
		"v580.95.05", "580.95.05 ", "+580.95.05", "580.-1.05", "58.1.01", "12345.1.01", "580.95.0x5"} {
		if v, err := ParseDriverVersion(in); err == nil {
			t.Errorf("ParseDriverVersion(%q) = %v, want an error", in, v)
		} else if !strings.Contains(err.Error(), `such as "580.95.05"`) {
			t.Errorf("ParseDriverVersion(%q): %v does not show the form", in, err)
		}
	}
}

func TestCheckDriverVersion(t *testing.T) {
	for _, ok := range []string{"580.95.05", "570.86.15", "535.288.01", "390.144", "580.105.08"} {
		if _, err := CheckDriverVersion(ok); err != nil {
			t.Errorf("CheckDriverVersion(%q): %v", ok, err)
		}
	}
	for in, canonical := range map[string]string{"580.95.5": "580.95.05", "580.095.05": "580.95.05", "0580.95.05": "580.95.05", "580.1.1": "580.1.01"} {
		_, err := CheckDriverVersion(in)
		if err == nil || !strings.Contains(err.Error(), `write "`+canonical+`"`) {
			t.Errorf("CheckDriverVersion(%q) = %v, want an error naming %q", in, err, canonical)
		}
	}
	if _, err := CheckDriverVersion("390.144"); err != nil {
		t.Errorf("a version without a patch is a version before R450: %v", err)
	}
	want := `"580.95" has no patch: every NVIDIA driver since R450 is MAJOR.MINOR.PATCH (450.51.05 … 580.95.05), so under enforce exact it never equals the node's driver and no driver image is tagged 580.95; write the full version as nvidia-smi prints it, "580.95.PP" (e.g. "580.95.05")`
	for _, in := range []string{"580.95", "450.51"} {
		if _, err := CheckDriverVersion(in); err == nil || (in == "580.95" && err.Error() != want) {
			t.Errorf("CheckDriverVersion(%q) = %v, want an error naming the patch", in, err)
		}
	}
}

func TestDriverSatisfies(t *testing.T) {
	p := func(s string) DriverVersion {
		v, err := ParseDriverVersion(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		enforce, expected, found string
		want                     bool
	}{
		{"exact", "580.95.05", "580.95.05", true},
		{"exact", "580.95.05", "580.95.5", true}, // numeric: both spellings agree
		{"exact", "580.95.5", "580.95.05", true},
		{"exact", "580.95.05", "580.95.50", false},
		{"exact", "580.95.05", "580.105.08", false},
		{"exact", "390.144", "390.144.00", false},
		{"branch", "580.95.05", "580.105.08", true},
		{"branch", "580.95.05", "570.86.15", false},
		{"branch", "580.95.05", "5800.95.05", false}, // a string prefix is not a branch
		{"", "580.95.05", "580.65.06", true},
		{"none", "580.95.05", "535.288.01", true},
	} {
		got, err := DriverSatisfies(c.enforce, p(c.expected), p(c.found))
		if err != nil || got != c.want {
			t.Errorf("DriverSatisfies(%q, %s, %s) = %v, %v; want %v", c.enforce, c.expected, c.found, got, err, c.want)
		}
	}
	if _, err := DriverSatisfies("newest", p("580.95.05"), p("580.95.05")); err == nil || !strings.Contains(err.Error(), "exact|branch|none") {
		t.Errorf("unknown enforce: %v", err)
	}
}

// Whatever parses has one canonical spelling that parses back to the same version and passes
// CheckDriverVersion; CheckDriverVersion accepts only that spelling.
func FuzzParseDriverVersion(f *testing.F) {
	for _, s := range []string{"580.95.05", "580.95.5", "390.144", "0580.095.5", "580.95.050", "1000.1.01", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseDriverVersion(s)
		if err != nil {
			if _, cerr := CheckDriverVersion(s); cerr == nil {
				t.Fatalf("CheckDriverVersion(%q) accepts what ParseDriverVersion refuses", s)
			}
			return
		}
		c := v.String()
		back, err := ParseDriverVersion(c)
		if err != nil || !back.Equal(v) {
			t.Fatalf("%q → %q → %v, %v", s, c, back, err)
		}
		if !v.HasPatch && v.Major >= FirstPatchedBranch {
			if _, err := CheckDriverVersion(s); err == nil {
				t.Fatalf("CheckDriverVersion(%q) accepts a version without a patch from R%d on", s, FirstPatchedBranch)
			}
			return
		}
		if _, err := CheckDriverVersion(c); err != nil {
			t.Fatalf("canonical %q refused: %v", c, err)
		}
		if _, err := CheckDriverVersion(s); (err == nil) != (s == c) {
			t.Fatalf("CheckDriverVersion(%q) = %v; canonical is %q", s, err, c)
		}
	})
}
