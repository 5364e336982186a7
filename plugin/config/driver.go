package config

import (
	"fmt"
	"strconv"
	"strings"
)

// Driver enforce rules (spec.driver.enforce, the agent config's driver.enforce): what a node's
// driver must match before its toolkit gate opens.
const (
	DriverEnforceExact  = "exact"  // the same version
	DriverEnforceBranch = "branch" // the same release branch (major), e.g. R580
	DriverEnforceNone   = "none"   // any driver; drift is only labelled
)

// DriverVersion is an NVIDIA driver version MAJOR.MINOR[.PATCH] (580.95.05, 570.86.15,
// 535.288.01, the old 390.144). NVIDIA writes the patch with two digits; nvidia-smi,
// /proc/driver/nvidia/version and NVML print it that way and the driver image tags
// (nvcr.io/nvidia/driver:580.95.05-ubuntu24.04) are named by it.
type DriverVersion struct {
	Major, Minor, Patch int
	HasPatch            bool
}

// ParseDriverVersion reads a driver version numerically, so "580.95.5" and "580.95.05" are the
// same version. Use it for versions a node reports; a version a person writes goes through
// CheckDriverVersion, which also insists on the canonical spelling.
func ParseDriverVersion(s string) (DriverVersion, error) {
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return DriverVersion{}, driverSyntaxError(s)
	}
	// Major: a release branch (R535, R580; R1000 one day); minor up to three digits, patch two.
	maxDigits := []int{4, 3, 2}
	nums := make([]int, len(parts))
	for i, p := range parts {
		if p == "" || len(p) > maxDigits[i] || strings.Trim(p, "0123456789") != "" {
			return DriverVersion{}, driverSyntaxError(s)
		}
		nums[i], _ = strconv.Atoi(p) // only digits, at most 4: cannot fail
	}
	v := DriverVersion{Major: nums[0], Minor: nums[1], HasPatch: len(nums) == 3}
	if v.HasPatch {
		v.Patch = nums[2]
	}
	if v.Major < 100 {
		return DriverVersion{}, driverSyntaxError(s)
	}
	return v, nil
}

func driverSyntaxError(s string) error {
	return fmt.Errorf("%q is not an NVIDIA driver version MAJOR.MINOR[.PATCH] such as \"580.95.05\" (as nvidia-smi prints it)", s)
}

// FirstPatchedBranch is the first release branch whose every driver has a patch number
// (450.51.05); older branches had versions like 390.144.
const FirstPatchedBranch = 450

// CheckDriverVersion is the rule for a driver version a person writes (spec.driver.version of
// a policy or pool, and the agent config rendered from it): it must parse and be spelt
// canonically, with a patch from R450 on. A non-canonical spelling is refused, not rewritten: "580.95.5" is no driver
// image tag, and under enforce exact a string compared with the node's 580.95.05 would never
// match; the error names the spelling to write. The function's validation and the agent's
// config loader both call it, so both refuse the same inputs with the same words.
func CheckDriverVersion(s string) (DriverVersion, error) {
	v, err := ParseDriverVersion(s)
	if err != nil {
		return v, err
	}
	if !v.HasPatch && v.Major >= FirstPatchedBranch {
		return v, fmt.Errorf("%q has no patch: every NVIDIA driver since R%d is MAJOR.MINOR.PATCH (450.51.05 … 580.95.05), so under enforce exact it never equals the node's driver and no driver image is tagged %s; write the full version as nvidia-smi prints it, \"%d.%d.PP\" (e.g. \"580.95.05\")", s, FirstPatchedBranch, s, v.Major, v.Minor)
	}
	if c := v.String(); c != s {
		return v, fmt.Errorf("%q is not how NVIDIA writes this driver version: write %q (the patch has two digits and no number has a leading zero, as nvidia-smi prints it and as the driver image tags are named)", s, c)
	}
	return v, nil
}

// String is the canonical spelling: minor without leading zeros, patch with two digits.
func (v DriverVersion) String() string {
	if !v.HasPatch {
		return fmt.Sprintf("%d.%d", v.Major, v.Minor)
	}
	return fmt.Sprintf("%d.%d.%02d", v.Major, v.Minor, v.Patch)
}

// Branch is the release branch, the major number (580 for 580.95.05).
func (v DriverVersion) Branch() int { return v.Major }

// Equal compares numerically; a version without a patch (390.144) differs from any with one.
func (v DriverVersion) Equal(o DriverVersion) bool { return v == o }

// DriverSatisfies says whether a node's driver found satisfies expected under an enforce rule
// ("" is branch, the default): exact needs Equal, branch the same Branch, none nothing. An
// unknown rule is an error naming the valid ones.
func DriverSatisfies(enforce string, expected, found DriverVersion) (bool, error) {
	switch enforce {
	case DriverEnforceExact:
		return found.Equal(expected), nil
	case DriverEnforceBranch, "":
		return found.Branch() == expected.Branch(), nil
	case DriverEnforceNone:
		return true, nil
	}
	return false, fmt.Errorf("driver.enforce %q is not exact|branch|none", enforce)
}
