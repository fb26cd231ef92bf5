package exporters

import (
	"testing"

	"github.com/ttftlens/ttftlens/record"
)

// TestLogCarriesEveryField: the log line is the record's JSON form in
// full, so every field is in it (when it applies). A field no form carries
// would never be written.
func TestLogCarriesEveryField(t *testing.T) {
	for f := range record.NumFields {
		if fieldsIn[inLog]&(1<<f) == 0 {
			t.Errorf("%s: not in the log line", f)
		}
	}
}
