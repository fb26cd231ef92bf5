package endreason

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDocsListTheDetails checks that the end reasons table of
// docs/record.md lists every reason with exactly its details.
func TestDocsListTheDetails(t *testing.T) {
	page, err := os.ReadFile("../docs/record.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(page), "\n## End reasons\n")
	if !ok {
		t.Fatal(`docs/record.md: no "## End reasons" section`)
	}
	name := regexp.MustCompile("`([a-z0-9_]+)`") // a detail; not a flag or [DONE]
	doc := map[string][]string{}
	rows := 0
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "|") {
			if rows > 0 {
				break // the first table is the end reasons'
			}
			continue
		}
		if rows++; rows <= 2 {
			continue // the header and its rule
		}
		cells := strings.Split(line, "|")
		reason := name.FindStringSubmatch(cells[1])
		if reason == nil || len(cells) < 4 {
			t.Fatalf("docs/record.md: not a row of reason and details: %s", line)
		}
		for _, m := range name.FindAllStringSubmatch(cells[2], -1) {
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
