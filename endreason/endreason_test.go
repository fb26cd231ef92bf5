package endreason

import (
	"testing"
)

func TestReasonString(t *testing.T) {
	tests := []struct {
		r    Reason
		want string
	}{
		{0, "unknown"},
		{Stop, "stop"},
		{Length, "length"},
		{PolicyBlock, "policy_block"},
		{InvalidRequest, "invalid_request"},
		{ClientCancel, "client_cancel"},
		{Deadline, "deadline"},
		{WorkerFailure, "worker_failure"},
		{UpstreamDisconnect, "upstream_disconnect"},
		{numReasons, "unknown"},
		{255, "unknown"},
	}
	for _, tc := range tests {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("Reason(%d).String() = %q, want %q", uint8(tc.r), got, tc.want)
		}
	}
}

func TestPhaseString(t *testing.T) {
	tests := []struct {
		p    Phase
		want string
	}{
		{PhaseNone, ""},
		{PhaseQueued, "queued"},
		{PhasePrefill, "prefill"},
		{PhaseDecoding, "decoding"},
		{PhasePreparing, "preparing"},
		{PhaseUpstream, "upstream"},
		{NumPhases, "phase?"},
		{200, "phase?"},
	}
	for _, tc := range tests {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("Phase(%d).String() = %q, want %q", uint8(tc.p), got, tc.want)
		}
	}
}

func TestAll(t *testing.T) {
	all := All()
	want := []Reason{Stop, Length, PolicyBlock, InvalidRequest, ClientCancel, Deadline, WorkerFailure, UpstreamDisconnect}
	if len(all) != len(want) {
		t.Fatalf("All() has %d reasons, want %d: %v", len(all), len(want), all)
	}
	seen := map[Reason]int{}
	names := map[string]bool{}
	for _, r := range all {
		seen[r]++
		if s := r.String(); s == "unknown" || s == "" || names[s] {
			t.Errorf("All(): reason %d has a bad or duplicate name %q", r, s)
		} else {
			names[s] = true
		}
	}
	for _, r := range want {
		if seen[r] != 1 {
			t.Errorf("All(): %v appears %d times, want once", r, seen[r])
		}
	}
	// Callers may keep and modify the slice: each call returns a fresh one.
	all[0] = 0
	if All()[0] != Stop {
		t.Error("All() shares its backing array between calls")
	}
}

func TestPhaseOf(t *testing.T) {
	tests := []struct {
		admitted, firstToken bool
		engine               Phase
		want                 Phase
	}{
		{false, false, PhaseNone, PhaseQueued},
		{false, false, PhasePrefill, PhaseQueued}, // not admitted: the engine cannot have it
		{true, false, PhaseNone, PhaseUpstream},
		{true, false, PhaseQueued, PhaseQueued},
		{true, false, PhasePreparing, PhasePreparing},
		{true, false, PhasePrefill, PhasePrefill},
		{true, true, PhasePrefill, PhaseDecoding},
		{false, true, PhaseNone, PhaseDecoding}, // a token proves admission even if the mark is missing
	}
	for _, tc := range tests {
		if got := PhaseOf(tc.admitted, tc.firstToken, tc.engine); got != tc.want {
			t.Errorf("PhaseOf(%v, %v, %v) = %v, want %v", tc.admitted, tc.firstToken, tc.engine, got, tc.want)
		}
	}
}

func TestParseFinish(t *testing.T) {
	tests := []struct {
		in   string
		want Finish
	}{
		{"", FinishNone},
		// OpenAI, vLLM, SGLang
		{"stop", FinishStop},
		{"length", FinishLength},
		{"tool_calls", FinishToolCalls},
		{"function_call", FinishToolCalls},
		{"content_filter", FinishContentFilter},
		{"abort", FinishAbort},
		// TGI
		{"eos_token", FinishStop},
		{"stop_sequence", FinishStop},
		{"max_tokens", FinishLength},
		// Anthropic
		{"end_turn", FinishStop},
		{"tool_use", FinishToolCalls},
		{"refusal", FinishContentFilter},
		// llama.cpp, Ollama and others
		{"eos", FinishStop},
		{"word", FinishStop},
		{"repetition", FinishStop},
		{"limit", FinishLength},
		{"model_length", FinishLength},
		{"error", FinishError},
		{"cancelled", FinishAbort},
		// Unknown spellings and case variants are not guessed at.
		{"STOP", FinishOther},
		{"Stop", FinishOther},
		{" stop", FinishOther},
		{"null", FinishOther},
		{"pause_turn", FinishOther},
		{"recitation", FinishOther},
	}
	for _, tc := range tests {
		if got := ParseFinish([]byte(tc.in)); got != tc.want {
			t.Errorf("ParseFinish(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
	if got := ParseFinish(nil); got != FinishNone {
		t.Errorf("ParseFinish(nil) = %d, want FinishNone", got)
	}
}

func TestParseFinishAllocs(t *testing.T) {
	v := []byte("model_length")
	if n := testing.AllocsPerRun(100, func() { ParseFinish(v) }); n != 0 {
		t.Errorf("ParseFinish allocates %v per call", n)
	}
}

func TestClassify(t *testing.T) {
	// ok is a clean, complete stream.
	ok := Facts{Status: 200, Stream: true, Finish: FinishStop, Done: true}
	with := func(f func(*Facts)) Facts {
		c := ok
		f(&c)
		return c
	}
	// everything is a request on which every symptom fired at once.
	everything := Facts{
		Rejected: PolicyBlock, RejectedDetail: "quota_exceeded", ClientGone: true, Deadline: DetailTTFTDeadline,
		ConnectFailed: true, ClosedBeforeResponse: true, Status: 503, BadContentType: true, Stream: true,
		ErrorEvent: true, Finish: FinishError, Done: false, Read: ReadReset,
	}
	peel := func(f func(*Facts)) Facts {
		c := everything
		f(&c)
		return c
	}
	tests := []struct {
		name   string
		facts  Facts
		reason Reason
		detail Detail
	}{
		// Clean endings.
		{"stream stop", ok, Stop, DetailStop},
		{"stream tool_calls", with(func(f *Facts) { f.Finish = FinishToolCalls }), Stop, DetailToolCalls},
		{"stream unknown finish is a stop", with(func(f *Facts) { f.Finish = FinishOther }), Stop, DetailStop},
		{"stream length", with(func(f *Facts) { f.Finish = FinishLength }), Length, DetailLength},
		{"stream content_filter", with(func(f *Facts) { f.Finish = FinishContentFilter }), PolicyBlock, DetailContentFilter},
		{"content_filter without done", with(func(f *Facts) { f.Finish = FinishContentFilter; f.Done = false }),
			PolicyBlock, DetailContentFilter},
		{"stream done only", with(func(f *Facts) { f.Finish = FinishNone }), Stop, DetailDoneOnly},
		{"stream stop without done", with(func(f *Facts) { f.Done = false }), Stop, DetailNoDoneMarker},
		{"stream length without done", with(func(f *Facts) { f.Finish = FinishLength; f.Done = false }),
			Length, DetailNoDoneMarker},
		{"stream tool_calls without done", with(func(f *Facts) { f.Finish = FinishToolCalls; f.Done = false }),
			Stop, DetailNoDoneMarker},
		{"stream eof without anything", with(func(f *Facts) { f.Finish = FinishNone; f.Done = false }),
			UpstreamDisconnect, DetailEOFWithoutDone},
		{"whole response, no finish", Facts{Status: 200}, Stop, DetailComplete},
		{"whole response, stop", Facts{Status: 200, Finish: FinishStop}, Stop, DetailStop},
		{"whole response, length", Facts{Status: 200, Finish: FinishLength}, Length, DetailLength},
		{"whole response needs no done", Facts{Status: 200, Finish: FinishToolCalls}, Stop, DetailToolCalls},
		{"zero facts", Facts{}, Stop, DetailComplete},

		// Our own rejections pass their reason and detail through.
		{"rejected quota", Facts{Rejected: PolicyBlock, RejectedDetail: "quota_exceeded"}, PolicyBlock, "quota_exceeded"},
		{"rejected bad body", Facts{Rejected: InvalidRequest, RejectedDetail: DetailMalformedRequest},
			InvalidRequest, DetailMalformedRequest},
		{"rejected: no upstream", Facts{Rejected: WorkerFailure, RejectedDetail: "no_healthy_upstream"},
			WorkerFailure, "no_healthy_upstream"},
		{"proxy panic", Facts{Rejected: WorkerFailure, RejectedDetail: DetailProxyPanic}, WorkerFailure, DetailProxyPanic},

		// Deadlines pass their detail through.
		{"ttft deadline", Facts{Deadline: DetailTTFTDeadline}, Deadline, DetailTTFTDeadline},
		{"total deadline", Facts{Deadline: DetailTotalDeadline, Status: 200, Stream: true, Read: ReadFailed},
			Deadline, DetailTotalDeadline},
		{"idle deadline", Facts{Deadline: DetailIdleDeadline, Status: 200, Stream: true}, Deadline, DetailIdleDeadline},
		{"shutdown", Facts{Deadline: DetailShutdown, Status: 200, Stream: true, Read: ReadFailed}, Deadline, DetailShutdown},
		{"client stopped reading", Facts{ClientGone: true, ClientStalled: true, Status: 200, Stream: true, Read: ReadFailed},
			ClientCancel, DetailClientWriteStall},

		// Upstream status.
		{"connect failed", Facts{ConnectFailed: true}, WorkerFailure, DetailConnectFailed},
		{"closed before response", Facts{ClosedBeforeResponse: true}, UpstreamDisconnect, DetailClosedBeforeResp},
		{"headers too large", Facts{HeadersTooLarge: true}, WorkerFailure, DetailHeadersTooLarge},
		{"malformed headers", Facts{MalformedHeaders: true}, WorkerFailure, DetailMalformedHeaders},
		{"500", Facts{Status: 500}, WorkerFailure, DetailUpstream5xx},
		{"503 streaming", Facts{Status: 503, Stream: true}, WorkerFailure, DetailUpstream5xx},
		{"599", Facts{Status: 599}, WorkerFailure, DetailUpstream5xx},
		{"401", Facts{Status: 401}, PolicyBlock, DetailUpstreamAuth},
		{"403", Facts{Status: 403}, PolicyBlock, DetailUpstreamAuth},
		{"429", Facts{Status: 429}, PolicyBlock, DetailUpstreamLimited},
		{"400", Facts{Status: 400}, InvalidRequest, DetailUpstreamRejected},
		{"404", Facts{Status: 404}, InvalidRequest, DetailUpstreamRejected},
		{"413", Facts{Status: 413}, InvalidRequest, DetailUpstreamRejected},
		{"499", Facts{Status: 499}, InvalidRequest, DetailUpstreamRejected},
		{"399 is not an error status", Facts{Status: 399}, Stop, DetailComplete},
		{"bad content type", Facts{Status: 200, Stream: true, BadContentType: true}, WorkerFailure, DetailBadContentType},

		// Mid-stream symptoms.
		{"error event", with(func(f *Facts) { f.ErrorEvent = true }), WorkerFailure, DetailErrorEvent},
		{"engine error finish", with(func(f *Facts) { f.Finish = FinishError }), WorkerFailure, DetailEngineError},
		{"engine abort finish", with(func(f *Facts) { f.Finish = FinishAbort }), WorkerFailure, DetailEngineAbort},
		{"event too large", with(func(f *Facts) { f.Read = ReadTooLarge }), WorkerFailure, DetailEventTooLarge},
		{"whole body too large", Facts{Status: 200, Read: ReadBodyTooLarge}, WorkerFailure, DetailUpstreamBodyTooLarge},
		{"malformed event", with(func(f *Facts) { f.Read = ReadMalformed }), WorkerFailure, DetailMalformedEvent},
		{"bad utf8", with(func(f *Facts) { f.Read = ReadBadUTF8 }), WorkerFailure, DetailInvalidUTF8},
		{"reset", with(func(f *Facts) { f.Read = ReadReset; f.Done = false }), UpstreamDisconnect, DetailResetMidStream},
		{"truncated", with(func(f *Facts) { f.Read = ReadTruncated }), UpstreamDisconnect, DetailTruncatedBody},
		{"read failed", with(func(f *Facts) { f.Read = ReadFailed }), UpstreamDisconnect, DetailReadFailed},
		{"reset after a finish is still a disconnect", with(func(f *Facts) { f.Read = ReadReset; f.Done = false }),
			UpstreamDisconnect, DetailResetMidStream},

		// Precedence, peeled one cause at a time from a request where
		// everything went wrong: rejection > client gone > deadline >
		// connect > headers too large > malformed headers > closed before response > status > content type >
		// error event > engine finish > read ending.
		{"prec: rejection first", everything, PolicyBlock, "quota_exceeded"},
		{"prec: client gone", peel(func(f *Facts) { f.Rejected = 0 }), ClientCancel, DetailClientClosed},
		{"prec: deadline", peel(func(f *Facts) { f.Rejected = 0; f.ClientGone = false }), Deadline, DetailTTFTDeadline},
		{"prec: connect", peel(func(f *Facts) { f.Rejected = 0; f.ClientGone = false; f.Deadline = "" }),
			WorkerFailure, DetailConnectFailed},
		{"prec: headers too large", peel(func(f *Facts) {
			f.Rejected, f.ClientGone, f.Deadline, f.ConnectFailed, f.HeadersTooLarge = 0, false, "", false, true
		}), WorkerFailure, DetailHeadersTooLarge},
		{"prec: malformed headers", peel(func(f *Facts) {
			f.Rejected, f.ClientGone, f.Deadline, f.ConnectFailed, f.MalformedHeaders = 0, false, "", false, true
		}), WorkerFailure, DetailMalformedHeaders},
		{"prec: closed before response", peel(func(f *Facts) {
			f.Rejected = 0
			f.ClientGone = false
			f.Deadline = ""
			f.ConnectFailed = false
		}), UpstreamDisconnect, DetailClosedBeforeResp},
		{"prec: 5xx", peel(func(f *Facts) {
			f.Rejected, f.ClientGone, f.Deadline, f.ConnectFailed, f.ClosedBeforeResponse = 0, false, "", false, false
		}), WorkerFailure, DetailUpstream5xx},
		{"prec: 429 over content type", peel(func(f *Facts) {
			f.Rejected, f.ClientGone, f.Deadline, f.ConnectFailed, f.ClosedBeforeResponse = 0, false, "", false, false
			f.Status = 429
		}), PolicyBlock, DetailUpstreamLimited},
		{"prec: content type", peel(func(f *Facts) {
			f.Rejected, f.ClientGone, f.Deadline, f.ConnectFailed, f.ClosedBeforeResponse = 0, false, "", false, false
			f.Status = 200
		}), WorkerFailure, DetailBadContentType},
		{"prec: error event", peel(func(f *Facts) {
			f.Rejected, f.ClientGone, f.Deadline, f.ConnectFailed, f.ClosedBeforeResponse = 0, false, "", false, false
			f.Status, f.BadContentType = 200, false
		}), WorkerFailure, DetailErrorEvent},
		{"prec: engine error over read", peel(func(f *Facts) {
			f.Rejected, f.ClientGone, f.Deadline, f.ConnectFailed, f.ClosedBeforeResponse = 0, false, "", false, false
			f.Status, f.BadContentType, f.ErrorEvent = 200, false, false
		}), WorkerFailure, DetailEngineError},
		{"prec: read ending over finish", peel(func(f *Facts) {
			f.Rejected, f.ClientGone, f.Deadline, f.ConnectFailed, f.ClosedBeforeResponse = 0, false, "", false, false
			f.Status, f.BadContentType, f.ErrorEvent, f.Finish = 200, false, false, FinishLength
		}), UpstreamDisconnect, DetailResetMidStream},
		{"prec: client gone after first token with a clean read", Facts{ClientGone: true, Status: 200, Stream: true,
			Finish: FinishStop, Done: true}, ClientCancel, DetailClientClosed},
		{"prec: client gone beats deadline", Facts{ClientGone: true, Deadline: DetailTotalDeadline},
			ClientCancel, DetailClientClosed},
		{"prec: too large over malformed-looking read", with(func(f *Facts) { f.Read = ReadTooLarge; f.Finish = FinishNone }),
			WorkerFailure, DetailEventTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, d := Classify(tc.facts)
			if r != tc.reason || d != tc.detail {
				t.Errorf("Classify(%+v) = %v/%s, want %v/%s", tc.facts, r, d, tc.reason, tc.detail)
			}
		})
	}
}

// TestClassifyCovers checks that the table above exercises every reason and
// every detail the package declares, so a new constant needs a case.
func TestClassifyCovers(t *testing.T) {
	// Every detail constant, and the reason it belongs to.
	details := map[Detail]Reason{
		DetailStop: Stop, DetailToolCalls: Stop, DetailDoneOnly: Stop, DetailComplete: Stop,
		DetailNoDoneMarker: Stop, DetailLength: Length, DetailContentFilter: PolicyBlock,
		DetailUpstreamAuth: PolicyBlock, DetailUpstreamLimited: PolicyBlock,
		DetailUpstreamRejected: InvalidRequest, DetailClientClosed: ClientCancel,
		DetailTTFTDeadline: Deadline, DetailTotalDeadline: Deadline, DetailIdleDeadline: Deadline,
		DetailShutdown: Deadline, DetailClientWriteStall: ClientCancel,
		DetailConnectFailed: WorkerFailure, DetailUpstream5xx: WorkerFailure, DetailErrorEvent: WorkerFailure,
		DetailEngineError: WorkerFailure, DetailEngineAbort: WorkerFailure, DetailEventTooLarge: WorkerFailure,
		DetailMalformedEvent: WorkerFailure, DetailInvalidUTF8: WorkerFailure, DetailBadContentType: WorkerFailure,
		DetailUpstreamBodyTooLarge: WorkerFailure, DetailHeadersTooLarge: WorkerFailure, DetailMalformedHeaders: WorkerFailure, DetailResetMidStream: UpstreamDisconnect,
		DetailTruncatedBody: UpstreamDisconnect, DetailEOFWithoutDone: UpstreamDisconnect,
		DetailReadFailed: UpstreamDisconnect, DetailClosedBeforeResp: UpstreamDisconnect,
		DetailMalformedRequest: InvalidRequest, DetailProxyPanic: WorkerFailure,
		DetailMissingKey: PolicyBlock, DetailInvalidKey: PolicyBlock, DetailQuotaExceeded: PolicyBlock, DetailQuotaUnavailable: WorkerFailure,
		DetailRequestBodyTooLarge: InvalidRequest, DetailUnknownModel: InvalidRequest, DetailInvalidParam: InvalidRequest,
		DetailNoHealthy: WorkerFailure, DetailQueueFull: WorkerFailure, DetailQueueTimeout: WorkerFailure,
		DetailBodyMemoryFull: WorkerFailure, DetailBodyReadTimeout: ClientCancel, DetailSLOUnmeetable: Deadline,
	}
	// Facts that the classifier decides on its own (no pass-through).
	var own []Facts
	for _, st := range []int{0, 200, 401, 403, 404, 429, 500} {
		for _, fin := range []Finish{FinishNone, FinishStop, FinishToolCalls, FinishLength, FinishContentFilter,
			FinishError, FinishAbort, FinishOther} {
			for rd := ReadClean; rd <= ReadBadUTF8; rd++ {
				for bits := range 1 << 10 {
					own = append(own, Facts{
						Status: st, Finish: fin, Read: rd,
						ClientGone: bits&1 != 0, ConnectFailed: bits&2 != 0, ClosedBeforeResponse: bits&4 != 0,
						BadContentType: bits&8 != 0, ErrorEvent: bits&16 != 0, Stream: bits&32 != 0,
						Done: bits&64 != 0, ClientStalled: bits&128 != 0, HeadersTooLarge: bits&256 != 0, MalformedHeaders: bits&512 != 0,
					})
				}
			}
		}
	}
	seenReason := map[Reason]bool{}
	seenDetail := map[Detail]bool{}
	for _, f := range own {
		r, d := Classify(f)
		if r == 0 || r >= numReasons {
			t.Fatalf("Classify(%+v) returned reason %d outside the set", f, r)
		}
		want, known := details[d]
		if !known {
			t.Fatalf("Classify(%+v) returned undeclared detail %q", f, d)
		}
		if want != r && !(d == DetailNoDoneMarker && r == Length) {
			t.Errorf("Classify(%+v) = %v/%s: detail belongs to %v", f, r, d, want)
		}
		seenReason[r] = true
		seenDetail[d] = true
	}
	// Pass-through details (rejections and deadlines) come from the caller.
	passThrough := map[Detail]bool{
		DetailTTFTDeadline: true, DetailTotalDeadline: true, DetailIdleDeadline: true, DetailShutdown: true,
		DetailMalformedRequest: true, DetailProxyPanic: true,
		// The gateway's rejections.
		DetailMissingKey: true, DetailInvalidKey: true, DetailQuotaExceeded: true, DetailQuotaUnavailable: true,
		DetailRequestBodyTooLarge: true, DetailUnknownModel: true, DetailInvalidParam: true,
		DetailNoHealthy: true, DetailQueueFull: true, DetailQueueTimeout: true, DetailSLOUnmeetable: true,
		// The front door's.
		DetailBodyMemoryFull: true, DetailBodyReadTimeout: true,
	}
	for d := range passThrough {
		var f Facts
		if details[d] == Deadline {
			f.Deadline = d
		} else {
			f.Rejected, f.RejectedDetail = details[d], d
		}
		r, got := Classify(f)
		if r != details[d] || got != d {
			t.Errorf("pass-through %s: got %v/%s", d, r, got)
		}
		seenReason[r], seenDetail[got] = true, true
	}
	for _, r := range All() {
		if !seenReason[r] {
			t.Errorf("reason %v never produced", r)
		}
	}
	for d := range details {
		if !seenDetail[d] {
			t.Errorf("detail %s never produced", d)
		}
	}
	// The package's own detail table agrees with the one above.
	n := 0
	for _, r := range All() {
		for _, d := range Details(r) {
			n++
			if want, ok := details[d]; !ok || want != r {
				t.Errorf("Details(%v) lists %s (test table: %v, %v)", r, d, want, ok)
			}
		}
	}
	if n != len(details) {
		t.Errorf("Details lists %d details over all reasons, want %d", n, len(details))
	}
	for d, want := range details {
		if r, ok := d.Reason(); !ok || r != want {
			t.Errorf("%s.Reason() = %v, %v; want %v", d, r, ok, want)
		}
	}
	if r, ok := Detail("no_such_detail").Reason(); ok {
		t.Errorf("unknown detail has reason %v", r)
	}
}
