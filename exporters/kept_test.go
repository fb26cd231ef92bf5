package exporters

import (
	"bytes"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/record"
)

// TestKeptOutlivesReuse: a kept record serves the same JSON after the
// proxy reused the record it came from (reset, another request's fields,
// another stream's gaps in the same buffer), and the same as the record
// served before it was kept.
func TestKeptOutlivesReuse(t *testing.T) {
	for _, f := range loggedFixtures() {
		t.Run(f.name, func(t *testing.T) {
			r := f.record()
			want := requestJSON(r)
			k := keep(r)

			other := typical()
			r.Reset() // keeps the gap buffer, as the proxy's pool does
			r.RequestID, r.Model, r.Reason = "another", "another-model", other.Reason
			r.Timeline = other.Timeline
			for i := range 50 {
				r.Stream.Content(time.Duration(i)*time.Hour, time.Minute)
			}
			r.Stream.Gaps()

			if got := requestJSON(&k.r); !bytes.Equal(got, want) {
				t.Errorf("kept record after reuse:\n%s\nbefore:\n%s", got, want)
			}
			if k.bd != k.r.Breakdown() {
				t.Errorf("kept breakdown %+v, derived again %+v", k.bd, k.r.Breakdown())
			}
		})
	}
}

// TestRecordCopySharesNoBuffer: record.Record.CopyTo leaves the gap buffer
// behind and keeps the gaps' summary.
func TestRecordCopySharesNoBuffer(t *testing.T) {
	r := new(record.Record)
	for i := range 10 {
		r.Stream.Content(time.Duration(i)*time.Millisecond, time.Second)
	}
	var c record.Record
	r.CopyTo(&c)
	if c.Stream.GapValues() != nil || c.Stream.Residencies() != nil {
		t.Fatal("the copy shares the stream's buffers")
	}
	if g := c.Stream.Gaps(); g != r.Stream.Gaps() || g.N == 0 {
		t.Fatalf("copy's gaps %+v, record's %+v", g, r.Stream.Gaps())
	}
}
