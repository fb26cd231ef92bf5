package record

import (
	"regexp"
	"slices"
	"testing"

	"github.com/ttftlens/ttftlens/internal/doctest"
)

// docRecordFields returns the field names the record table of
// docs/record.md lists, in order: the backquoted names in the first column
// of the page's first table.
func docRecordFields(t *testing.T) []string {
	t.Helper()
	return doctest.FirstColumn(t, "../docs/record.md", "", regexp.MustCompile("`([^`]+)`"))
}

// TestDocListsTheFields checks that docs/record.md's record table lists
// exactly the fields of the JSON form, in their order.
func TestDocListsTheFields(t *testing.T) {
	got := docRecordFields(t)
	if !slices.Equal(got, fieldNames[:]) {
		t.Errorf("docs/record.md's record table lists\n%v\nthe record's fields are\n%v", got, fieldNames)
	}
}

// TestFieldNames: every field has a name of its own (a name written twice
// in a JSON object would be ambiguous), and its name gives it back.
func TestFieldNames(t *testing.T) {
	seen := map[string]bool{}
	for f := range NumFields {
		name := f.String()
		if name == "" || seen[name] {
			t.Errorf("field %d: name %q empty or taken", f, name)
		}
		seen[name] = true
		var back Field
		if err := back.UnmarshalText([]byte(name)); err != nil || back != f {
			t.Errorf("%q reads back as %d, %v; want %d", name, back, err, f)
		}
	}
	var f Field
	if err := f.UnmarshalText([]byte("marks_ms")); err == nil {
		t.Errorf("marks_ms read as field %d, want an error", f)
	}
}
