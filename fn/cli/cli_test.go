package cli

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

func TestDispatch(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"help"}, 0, "gpupolicy-fn render -f POLICY -o DIR"},
		{[]string{"--help"}, 0, "gpupolicy-fn diff BASE HEAD"},
		{[]string{"version"}, 0, "v"},
		{[]string{"frobnicate"}, 2, ""},
	} {
		var out, errb bytes.Buffer
		code := Main(context.Background(), tc.args, strings.NewReader(""), &out, &errb)
		if code != tc.code || !strings.Contains(out.String(), tc.out) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", tc.args, code, out.String(), errb.String())
		}
	}
}

// TestNoArgumentsIsKRM: without arguments the binary is the KRM function on stdin/stdout.
func TestNoArgumentsIsKRM(t *testing.T) {
	in, err := os.ReadFile("../krm/testdata/kustomize-input.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := Main(context.Background(), nil, bytes.NewReader(in), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "kind: ResourceList") || !strings.Contains(out.String(), "name: gpu-device-plugin-inference") {
		t.Fatalf("unexpected output:\n%.400s", out.String())
	}
}
