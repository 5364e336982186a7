package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
)

// typeDocs holds the doc comments of one Go package: per type, and per type and field.
type typeDocs struct {
	types  map[string]string            // type name → doc
	fields map[string]map[string]string // type name → Go field name → doc
}

// comments reads the doc comments of the Go packages the schema reflects over. The
// descriptions come from the same comments a Go reader sees, so the two cannot drift.
type comments struct {
	dirs map[string]string    // import path → source directory (known ahead, e.g. from a flag)
	pkgs map[string]*typeDocs // import path → parsed docs
}

func newComments(dirs map[string]string) *comments {
	return &comments{dirs: dirs, pkgs: map[string]*typeDocs{}}
}

// field returns the cleaned doc of field goName of type typeName in package pkgPath, with a
// leading Go field name ("Namespace receives…") replaced by its JSON name.
func (c *comments) field(pkgPath, typeName, goName, jsonName string) (string, error) {
	d, err := c.pkg(pkgPath)
	if err != nil {
		return "", err
	}
	text := d.fields[typeName][goName]
	if rest, ok := strings.CutPrefix(text, goName+" "); ok {
		text = jsonName + " " + rest
	}
	return text, nil
}

func (c *comments) typ(pkgPath, typeName string) (string, error) {
	d, err := c.pkg(pkgPath)
	if err != nil {
		return "", err
	}
	return d.types[typeName], nil
}

func (c *comments) pkg(path string) (*typeDocs, error) {
	if d, ok := c.pkgs[path]; ok {
		return d, nil
	}
	dir, ok := c.dirs[path]
	if !ok {
		// Packages outside this module (k8s.io/api/core/v1): ask the go command where the
		// pinned version lives, so the text matches go.mod exactly.
		out, err := exec.Command("go", "list", "-f", "{{.Dir}}", path).Output()
		if err != nil {
			return nil, fmt.Errorf("locating the source of %s for field descriptions: %w", path, err)
		}
		dir = strings.TrimSpace(string(out))
	}
	d, err := parseDocs(dir)
	if err != nil {
		return nil, err
	}
	c.pkgs[path] = d
	return d, nil
}

func parseDocs(dir string) (*typeDocs, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	d := &typeDocs{types: map[string]string{}, fields: map[string]map[string]string{}}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("reading field comments: %w", err)
		}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.TYPE {
				continue
			}
			for _, spec := range gen.Specs {
				addTypeDocs(d, gen, spec.(*ast.TypeSpec))
			}
		}
	}
	return d, nil
}

func addTypeDocs(d *typeDocs, gen *ast.GenDecl, ts *ast.TypeSpec) {
	group := ts.Doc
	if group == nil && len(gen.Specs) == 1 {
		group = gen.Doc
	}
	d.types[ts.Name.Name] = clean(group.Text())
	st, ok := ts.Type.(*ast.StructType)
	if !ok {
		return
	}
	fields := map[string]string{}
	for _, f := range st.Fields.List {
		// A field documents itself above, beside, or both (`Source string // a | b`).
		parts := []string{clean(f.Doc.Text()), clean(f.Comment.Text())}
		text := strings.TrimSpace(strings.Join(nonEmpty(parts), " "))
		for _, n := range f.Names {
			fields[n.Name] = text
		}
	}
	d.fields[ts.Name.Name] = fields
}

// clean joins a comment into one paragraph-preserving string without Go-specific markers
// (+k8s: tags, TODO lines) that mean nothing to a schema reader.
func clean(text string) string {
	var paras []string
	for _, p := range strings.Split(strings.TrimSpace(text), "\n\n") {
		var lines []string
		for _, l := range strings.Split(p, "\n") {
			l = strings.TrimSpace(l)
			if l == "" || strings.HasPrefix(l, "+") || strings.HasPrefix(l, "TODO") || strings.HasPrefix(l, "Deprecated") {
				continue
			}
			lines = append(lines, l)
		}
		if len(lines) > 0 {
			paras = append(paras, strings.Join(lines, " "))
		}
	}
	return strings.Join(paras, "\n\n")
}

func nonEmpty(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
