// Command schemagen writes the GPUPolicy's JSON Schema, its CustomResourceDefinition and the
// field table of the reference document from the Go types of fn/api/v1alpha1: descriptions
// from the field comments, defaults from v1alpha1.Default, enums from its constants. Output is
// deterministic; a test fails when the committed files differ from what this program writes.
//
//	go run ./fn/internal/schemagen            # from the repository root
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
)

func main() {
	fs := flag.NewFlagSet("schemagen", flag.ExitOnError)
	api := fs.String("api", "fn/api/v1alpha1", "source directory of the v1alpha1 package (field comments are read from it)")
	out := fs.String("out", "fn/api/v1alpha1/schema", "directory for "+JSONSchemaFile+" and "+CRDFile)
	ref := fs.String("reference", "fn/api/v1alpha1/README.md", "reference document whose generated field table is replaced")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./fn/internal/schemagen [flags]\n\nRegenerates the GPUPolicy schema, CRD and reference field table.\n\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	files, err := generate(*api, *out, *ref)
	if err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
	for path, data := range files {
		if err := writeAtomic(path, data); err != nil {
			fmt.Fprintln(os.Stderr, "schemagen:", err)
			os.Exit(1)
		}
	}
}

// generate returns every output file's path and content.
func generate(apiDir, outDir, referencePath string) (map[string][]byte, error) {
	pkg := reflect.TypeOf(v1alpha1.GPUPolicy{}).PkgPath()
	b := &builder{docs: newComments(map[string]string{pkg: apiDir})}
	root, err := b.policy()
	if err != nil {
		return nil, err
	}
	js, err := jsonSchema(root)
	if err != nil {
		return nil, err
	}
	crd, err := crdYAML(root)
	if err != nil {
		return nil, err
	}
	doc, err := os.ReadFile(referencePath)
	if err != nil {
		return nil, err
	}
	doc, err = spliceTable(doc, referenceTable(root))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", referencePath, err)
	}
	return map[string][]byte{
		filepath.Join(outDir, JSONSchemaFile): js,
		filepath.Join(outDir, CRDFile):        crd,
		referencePath:                         doc,
	}, nil
}

// writeAtomic replaces path in one rename, so an interrupted run never leaves half a schema.
func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
