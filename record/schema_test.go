package record

import (
	"bufio"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readmeRecordFields returns the field names the README's record table
// lists, in order: the backquoted names in the first column of the table
// under "## The record".
func readmeRecordFields(t *testing.T) []Field {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## The record\n")
	if !ok {
		t.Fatal(`README: no "## The record" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	name := regexp.MustCompile("`([^`]+)`")
	var fields []Field
	inTable := false
	sc := bufio.NewScanner(strings.NewReader(section))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break // the first table is the record's
			}
			continue
		}
		inTable = true
		cells := strings.Split(line, "|")
		if strings.TrimSpace(cells[1]) == "field" || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			fields = append(fields, Field(m[1]))
		}
	}
	return fields
}

// TestReadmeListsTheFields checks that the README's record table lists
// exactly the fields of the JSON form, in their order.
func TestReadmeListsTheFields(t *testing.T) {
	got := readmeRecordFields(t)
	if !slices.Equal(got, Fields[:]) {
		t.Errorf("the README's record table lists\n%v\nthe record's fields are\n%v", got, Fields)
	}
}

// TestFieldsAreDistinct: a name written twice in a JSON object would be
// ambiguous.
func TestFieldsAreDistinct(t *testing.T) {
	seen := map[Field]bool{}
	for _, f := range Fields {
		if seen[f] {
			t.Errorf("%s twice in Fields", f)
		}
		seen[f] = true
	}
}
