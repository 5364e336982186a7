package cli

import (
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/doctor"
	"github.com/gpupolicy/gpupolicy/fn/internal/fntest"
)

// TestDoctorFlags: help, stray arguments, and flags that reach doctor.Options (their checks
// come before any cluster read, so no API server is needed; fn/doctor tests Run against one).
func TestDoctorFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--help"}, doctor.ExitOK, "Exit status: 0 nothing wrong"},
		{[]string{"-o", "yaml"}, doctor.ExitFailed, `-o "yaml": want table or json`},
		{[]string{"--pod", "train"}, doctor.ExitFailed, `--pod "train": want NAMESPACE/NAME`},
		{[]string{"extra"}, doctor.ExitFailed, `unexpected argument "extra"`},
		{[]string{"--kubeconfig", "testdata/no-such-kubeconfig"}, doctor.ExitFailed, "loading the kubeconfig"},
		{[]string{"--bogus"}, doctor.ExitFailed, "flag provided but not defined: -bogus"},
	} {
		code, _, stderr := fntest.Run(Doctor, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.msg) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr, tc.code, tc.msg)
		}
	}
}
