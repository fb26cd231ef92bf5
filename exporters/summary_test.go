package exporters

import (
	"reflect"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// TestRestoreKeepsWhatFillCopied: the record a Summary restores fills the
// same Summary again, but for the gaps (a Summary keeps their percentiles,
// not the gaps). The pages write the record's fields from it.
func TestRestoreKeepsWhatFillCopied(t *testing.T) {
	r := typical()
	r.ParentID = record.SpanID{1}
	r.Key, r.Error = "team-a", "upstream said no"
	r.QuotaChecked, r.QuotaFallback, r.QuotaTime = true, true, 7*time.Microsecond
	r.Reason, r.Detail, r.Phase = endreason.ClientCancel, endreason.DetailClientClosed, endreason.PhaseDecoding
	r.TokensIn, r.UsageReported, r.ReasoningTokens = 12, true, 9
	r.Stream.Stalls = 2
	r.EngineInferred = true
	r.EngineLoad, r.EngineWaiting, r.EngineRunning = true, 3, 4
	r.Buffering = record.BufferedBurst
	r.CancelToClose, r.TokensAfterCancel = time.Millisecond, 5

	var s Summary
	s.Fill(r)
	v := reflect.ValueOf(s)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("Summary.%s is zero: the test record must set every field to catch one restore leaves out", v.Type().Field(i).Name)
		}
	}
	var back record.Record
	s.restore(&back)
	var again Summary
	again.Fill(&back)
	if again.Gaps != (stages.Gaps{}) {
		t.Errorf("restored gaps %+v: a Summary keeps no gaps", again.Gaps)
	}
	again.Gaps = s.Gaps
	// Breakdown and E2E are derived from the restored Timeline; the clock
	// it holds is a func, which DeepEqual does not compare.
	s.Timeline, again.Timeline = stages.Timeline{}, stages.Timeline{}
	if !reflect.DeepEqual(again, s) {
		t.Errorf("filled from the restored record:\n%+v\nfrom the record:\n%+v", again, s)
	}
}
