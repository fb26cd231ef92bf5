package bench

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseRecord reads arbitrary lines as records, seeded with the golden
// log lines: a record or an error, never a panic (bench reads logs it did
// not write).
func FuzzParseRecord(f *testing.F) {
	paths, _ := filepath.Glob("../exporters/testdata/log/*.json")
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"msg":"request","request_id":"x","ttft_ms":1,"stages_ms":{"queue":-1}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		_, _ = ParseRecord(line)
	})
}
