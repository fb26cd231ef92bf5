package endreason

import (
	"regexp"
	"slices"
	"testing"

	"github.com/ttftlens/ttftlens/internal/doctest"
)

// TestDocsListTheDetails checks that the end reasons table of
// docs/record.md lists every reason with exactly its details.
func TestDocsListTheDetails(t *testing.T) {
	name := regexp.MustCompile("`([a-z0-9_]+)`") // a detail; not a flag or [DONE]
	doc := map[string][]string{}
	for _, row := range doctest.Table(t, "../docs/record.md", "## End reasons") {
		reason := name.FindStringSubmatch(row[0])
		if reason == nil || len(row) < 2 {
			t.Fatalf("docs/record.md: not a row of reason and details: %q", row)
		}
		for _, m := range name.FindAllStringSubmatch(row[1], -1) {
			doc[reason[1]] = append(doc[reason[1]], m[1])
		}
	}
	for _, r := range All() {
		var code []string
		for _, d := range Details(r) {
			code = append(code, string(d))
		}
		got := doc[r.String()]
		slices.Sort(code)
		slices.Sort(got)
		if !slices.Equal(got, code) {
			t.Errorf("docs/record.md lists for %s\n%v\nits details are\n%v", r, got, code)
		}
		delete(doc, r.String())
	}
	for r := range doc {
		t.Errorf("docs/record.md lists %s, which is no end reason", r)
	}
}
