package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestMakefile: every target of the Makefile has a "## " description, so
// "make help" lists it, and the -X stamps of "make build" name variables
// of this package (the linker ignores a name that does not exist).
func TestMakefile(t *testing.T) {
	data, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	mk := string(data)
	target := regexp.MustCompile(`(?m)^([A-Za-z0-9_-]+):([^=].*)?$`)
	targets := target.FindAllStringSubmatch(mk, -1)
	if len(targets) == 0 {
		t.Fatal("no targets found in the Makefile")
	}
	for _, m := range targets {
		if _, desc, ok := strings.Cut(m[2], "## "); !ok || strings.TrimSpace(desc) == "" {
			t.Errorf("target %s has no \"## description\": make help leaves it out", m[1])
		}
	}

	vars := map[string]bool{}
	f, err := parser.ParseFile(token.NewFileSet(), "version.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.VAR {
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					vars[n.Name] = true
				}
			}
		}
	}
	stamps := regexp.MustCompile(`-X main\.([A-Za-z0-9_]+)=`).FindAllStringSubmatch(mk, -1)
	if len(stamps) != 2 {
		t.Fatalf("the Makefile has %d -X stamps, want 2 (version and revision)", len(stamps))
	}
	for _, m := range stamps {
		if !vars[m[1]] {
			t.Errorf("make build stamps main.%s, which version.go does not declare", m[1])
		}
	}
}
