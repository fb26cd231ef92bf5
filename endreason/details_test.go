package endreason

import "testing"

// TestDetailTable checks the detail → reason table against Classify.
func TestDetailTable(t *testing.T) {
	cases := []Facts{
		{Rejected: PolicyBlock, RejectedDetail: DetailUpstreamAuth},
		{ClientGone: true},
		{Deadline: DetailTTFTDeadline}, {Deadline: DetailTotalDeadline}, {Deadline: DetailIdleDeadline},
		{ConnectFailed: true}, {HeadersTooLarge: true}, {MalformedHeaders: true}, {ClosedBeforeResponse: true}, {Status: 503}, {Status: 401}, {Status: 429}, {Status: 400},
		{BadContentType: true}, {ErrorEvent: true}, {Finish: FinishError}, {Finish: FinishAbort},
		{Read: ReadTooLarge}, {Read: ReadBodyTooLarge}, {Read: ReadMalformed}, {Read: ReadBadUTF8},
		{Rejected: InvalidRequest, RejectedDetail: DetailMalformedRequest}, {Rejected: WorkerFailure, RejectedDetail: DetailProxyPanic}, {Read: ReadReset},
		{Read: ReadTruncated}, {Read: ReadFailed},
		{Finish: FinishStop}, {Finish: FinishToolCalls}, {Finish: FinishLength},
		{Finish: FinishContentFilter}, {}, {Stream: true}, {Stream: true, Done: true},
		{Stream: true, Finish: FinishStop},
	}
	for _, f := range cases {
		r, d := Classify(f)
		if got, ok := d.Reason(); !ok || got != r {
			t.Errorf("Classify(%+v) = %s/%s; table says %s (known %v)", f, r, d, got, ok)
		}
	}
}

// TestDetailsCoverReasons checks every reason has details and every detail
// is listed under its own reason.
func TestDetailsCoverReasons(t *testing.T) {
	n := 0
	for _, r := range All() {
		ds := Details(r)
		if len(ds) == 0 {
			t.Errorf("%s has no details", r)
		}
		for _, d := range ds {
			if got, _ := d.Reason(); got != r {
				t.Errorf("%s listed under %s but refines %s", d, r, got)
			}
		}
		n += len(ds)
	}
	if n != len(detailReasons) {
		t.Errorf("details listed %d, table has %d", n, len(detailReasons))
	}
}
