package main

import (
	"flag"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ttftlens/ttftlens/internal/doctest"
)

// docFlags returns the flags the table of docs/configuration.md lists: the
// `--name` forms in the first column of the page's first table.
func docFlags(t *testing.T) []string {
	t.Helper()
	return doctest.FirstColumn(t, "../../docs/configuration.md", "", regexp.MustCompile("`--([a-z0-9*-]+)`"))
}

// TestDocsListServeFlags checks that docs/configuration.md's flag table lists
// every flag of serve and no other; the embedded engine's flags are one row,
// `--engine-*`.
func TestDocsListServeFlags(t *testing.T) {
	var f serveFlags
	fs := newFlagSet("serve", "", "TTFTLENS_")
	f.register(fs.FlagSet)
	var code []string
	engineFlags := false
	fs.VisitAll(func(fl *flag.Flag) {
		if strings.HasPrefix(fl.Name, "engine-") {
			engineFlags = true
			return
		}
		code = append(code, fl.Name)
	})
	if engineFlags {
		code = append(code, "engine-*")
	}
	doc := docFlags(t)
	slices.Sort(code)
	slices.Sort(doc)
	if !slices.Equal(doc, code) {
		t.Errorf("docs/configuration.md's flag table lists\n%v\nserve's flags are\n%v", doc, code)
	}
}
