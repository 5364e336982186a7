package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/internal/peer"
)

// AJVVersion is the ajv-cli the editor schema is checked with (the Makefile pins the same).
const AJVVersion = "5.0.0"

// TestJSONSchemaPassesStrictAJV runs the real ajv (ajv-cli from npm, as editors' validators
// are built on it) in strict mode: the schema compiles (no keyword JSON Schema lacks, such
// as Kubernetes' x-kubernetes-*, no OpenAPI-only format), accepts every valid policy and
// refuses every mistake.
func TestJSONSchemaPassesStrictAJV(t *testing.T) {
	ajv := peer.Tool(t, "AJV", "ajv-cli", AJVVersion, "node_modules/.bin/ajv")
	schema, err := filepath.Abs(filepath.Join(schemaDir, JSONSchemaFile))
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		out, err := exec.Command(ajv, append(args, "--strict=true", "-s", schema)...).CombinedOutput()
		return string(out), err
	}
	if out, err := run("compile"); err != nil {
		t.Fatalf("ajv compile --strict=true refuses the schema: %v\n%s", err, out)
	}
	dir := t.TempDir()
	write := func(prefix, name string, doc []byte) {
		t.Helper()
		j, err := json.Marshal(yamlToJSON(t, doc))
		if err != nil {
			t.Fatal(err)
		}
		file := prefix + "-" + strings.NewReplacer(" ", "_", "/", "_").Replace(name) + ".json"
		if err := os.WriteFile(filepath.Join(dir, file), j, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, doc := range validPolicies(t) {
		write("valid", name, doc)
	}
	for name, c := range mistakes {
		write("invalid", name, []byte(minimalPolicyYAML+c.extra))
	}
	if out, err := run("test", "--valid", "-d", filepath.Join(dir, "valid-*.json")); err != nil {
		t.Errorf("ajv refuses valid policies: %v\n%s", err, out)
	}
	if out, err := run("test", "--invalid", "-d", filepath.Join(dir, "invalid-*.json")); err != nil {
		t.Errorf("ajv accepts a mistake: %v\n%s", err, out)
	}
}
