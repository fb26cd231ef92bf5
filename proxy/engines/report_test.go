package engines

import (
	"slices"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/stages"
)

// headers is a header lookup over a map, as the proxy's Peek is.
func headers(m map[string]string) func(string) []byte {
	return func(name string) []byte {
		if v, ok := m[name]; ok {
			return []byte(v)
		}
		return nil
	}
}

// TestReportSource checks which signal a record names as its engine report:
// the Server-Timing protocol over a reader's own header signals, an event
// that carries timing over both, and nothing when nothing reported.
func TestReportSource(t *testing.T) {
	const vllmMetrics = `{"id":"x","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2},"metrics":{"queue_time_ms":1,"time_to_first_token_ms":2}}`
	tests := []struct {
		name    string
		kind    string
		header  map[string]string
		comment string
		event   string
		trailer map[string]string
		want    string
	}{
		{"nothing", KindGeneric, nil, "", "", nil, ""},
		{"server-timing header, reference", KindReference, map[string]string{"Server-Timing": "prefill;dur=2"}, "", "", nil, SourceServerTiming},
		{"server-timing header, any kind", KindGeneric, map[string]string{"Server-Timing": "prefill;dur=2"}, "", "", nil, SourceServerTiming},
		{"in-band comment", KindReference, nil, "server-timing queue;dur=1", "", nil, SourceServerTiming},
		{"trailer", KindReference, nil, "", "", map[string]string{"Server-Timing": "prefill;dur=2"}, SourceServerTiming},
		{"tgi headers", KindTGI, map[string]string{"X-Queue-Time": "3", "X-Inference-Time": "9"}, "", "", nil, KindTGI},
		{"vllm usage chunk", KindVLLM, nil, "", vllmMetrics, nil, KindVLLM},
		{"vllm usage chunk read as generic", KindGeneric, nil, "", vllmMetrics, nil, KindVLLM},
		{"an event's timing wins over the protocol", KindVLLM, map[string]string{"Server-Timing": "prefill;dur=2"}, "", vllmMetrics, nil, KindVLLM},
		{"unknown comment", KindReference, nil, "keep-alive", "", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Report
			tl := newTL()
			r.Begin(tt.kind, headers(nil))
			r.Headers(headers(tt.header), tl)
			if tt.comment != "" {
				r.Comment([]byte(tt.comment), tl)
			}
			if tt.event != "" {
				r.Event([]byte(tt.event), tl)
			}
			r.End(headers(tt.trailer), tl, 0)
			if got := r.Source(); got != tt.want {
				t.Errorf("source %q, want %q", got, tt.want)
			}
		})
	}
}

func TestReportComment(t *testing.T) {
	tests := []struct {
		comment  string
		consumed bool
		phase    endreason.Phase
	}{
		{"server-timing queue;dur=1", true, endreason.PhaseNone},
		{"ttftlens-phase queued", true, endreason.PhaseQueued},
		{"ttftlens-phase prefill", true, endreason.PhasePrefill},
		{"ttftlens-phase unknown", true, endreason.PhaseNone},
		{"keep-alive", false, endreason.PhaseNone},
		{"", false, endreason.PhaseNone},
	}
	for _, tt := range tests {
		t.Run(tt.comment, func(t *testing.T) {
			var r Report
			r.Begin(KindReference, headers(nil))
			if got := r.Comment([]byte(tt.comment), newTL()); got != tt.consumed {
				t.Errorf("consumed %v, want %v", got, tt.consumed)
			}
			if got := r.Phase(false, newTL()); got != tt.phase {
				t.Errorf("phase %v, want %v", got, tt.phase)
			}
		})
	}
}

// TestReportPhase checks where a cancelled request was, as the engine said:
// the reference engine's headers mean "prepared", unless a fault held them.
func TestReportPhase(t *testing.T) {
	tests := []struct {
		name      string
		kind      string
		fault     string
		streaming bool
		marks     []stages.Mark
		said      string // a progress comment's value
		want      endreason.Phase
	}{
		{"reference stream, sent, no headers", KindReference, "", true, []stages.Mark{stages.UpstreamSent}, "", endreason.PhasePreparing},
		{"reference stream, headers came", KindReference, "", true, []stages.Mark{stages.UpstreamSent, stages.UpstreamHeaders}, "", endreason.PhaseNone},
		{"reference stream, not sent", KindReference, "", true, nil, "", endreason.PhaseNone},
		{"reference, not streamed", KindReference, "", false, []stages.Mark{stages.UpstreamSent}, "", endreason.PhaseNone},
		{"reference, headers held by a fault", KindReference, "straggler=0:1ms, hold_headers", true, []stages.Mark{stages.UpstreamSent}, "", endreason.PhaseNone},
		{"another engine says nothing", KindVLLM, "", true, []stages.Mark{stages.UpstreamSent}, "", endreason.PhaseNone},
		{"progress comment wins", KindReference, "", true, []stages.Mark{stages.UpstreamSent}, "queued", endreason.PhaseQueued},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Report
			r.Begin(tt.kind, headers(map[string]string{FaultHeader: tt.fault}))
			tl := newTL()
			for _, m := range tt.marks {
				tl.Mark(m)
			}
			if tt.said != "" {
				r.Comment([]byte("ttftlens-phase "+tt.said), tl)
			}
			if got := r.Phase(tt.streaming, tl); got != tt.want {
				t.Errorf("phase %v, want %v", got, tt.want)
			}
		})
	}
}

// TestReportResetForgets checks that nothing of one request's engine
// report reaches the next request's, even one that never reaches Begin.
func TestReportResetForgets(t *testing.T) {
	var r Report
	tl := newTL()
	r.Begin(KindReference, headers(nil))
	r.Comment([]byte("ttftlens-phase prefill"), tl)
	r.Headers(headers(map[string]string{"Server-Timing": "prefill;dur=2"}), tl)
	r.Reset()
	end := newTL()
	end.MarkAt(stages.UpstreamSent, 0)
	end.MarkAt(stages.FirstToken, time.Second)
	r.End(headers(nil), end, time.Millisecond)
	if r.Source() != "" || r.Phase(true, newTL()) != endreason.PhaseNone || end.EngineReported() || end.Inferred() != 0 {
		t.Errorf("after Reset: source %q, phase %v", r.Source(), r.Phase(true, newTL()))
	}
}

func TestReportUpstreamBody(t *testing.T) {
	const body = `{"model":"m","stream":true,"messages":[]}`
	tests := []struct {
		name                              string
		kind                              string
		completion, streaming, clientAsks bool
		wantDrop                          bool
	}{
		{"vllm stream, client did not ask", KindVLLM, true, true, false, true},
		{"vllm stream, client asked", KindVLLM, true, true, true, false},
		{"vllm, not streamed", KindVLLM, true, false, false, false},
		{"vllm, not a completion", KindVLLM, false, true, false, false},
		{"reference stream, client did not ask", KindReference, true, true, false, true},
		{"another engine", KindSGLang, true, true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Report
			r.Begin(tt.kind, headers(nil))
			send, drop := r.UpstreamBody([]byte(body), nil, tt.completion, tt.streaming, tt.clientAsks)
			if drop != tt.wantDrop {
				t.Fatalf("drop %v, want %v", drop, tt.wantDrop)
			}
			if want := body; !drop && string(send) != want {
				t.Errorf("body changed to %s", send)
			}
			if want := `{"stream_options":{"include_usage":true},"model":"m","stream":true,"messages":[]}`; drop && string(send) != want {
				t.Errorf("body %s, want %s", send, want)
			}
		})
	}
}

func TestKindFor(t *testing.T) {
	tests := []struct{ path, upstream, want string }{
		{"/v1/messages", KindVLLM, KindAnthropic},
		{"/api/chat", KindGeneric, KindOllama},
		{"/api/generate", KindReference, KindOllama},
		{"/v1/chat/completions", KindVLLM, KindVLLM},
		{"/generate", KindTGI, KindTGI},
	}
	for _, tt := range tests {
		if got := KindFor([]byte(tt.path), tt.upstream); got != tt.want {
			t.Errorf("KindFor(%s, %s) = %s, want %s", tt.path, tt.upstream, got, tt.want)
		}
	}
}

// FuzzDetect feeds identification arbitrary headers, models bodies and
// Server headers: it names one of the kinds, and never panics.
func FuzzDetect(f *testing.F) {
	f.Add("prefill;dur=1", `{"data":[{"id":"m","owned_by":"vllm"}]}`, "uvicorn")
	f.Add("", `{"models":[{"name":"llama3"}]}`, "")
	f.Add("", `{"model_id":"x","version":"2.0"}`, "text-generation-inference")
	f.Add("", `{"data":[{"id":"m","owned_by":"llamacpp"}]}`, "llama.cpp")
	f.Fuzz(func(t *testing.T, serverTiming, body, server string) {
		h := headers(map[string]string{"Server-Timing": serverTiming, "Server": server})
		if kind := Detect(h, []byte(body), []byte(server)); !slices.Contains(Kinds, kind) {
			t.Fatalf("Detect = %q, not a kind", kind)
		}
	})
}

// FuzzReport feeds a request's report arbitrary comments and headers: no
// panic, and the source is one it can name.
func FuzzReport(f *testing.F) {
	f.Add("server-timing prefill;dur=2", "queue;dur=1", "ttftlens-phase queued")
	f.Add("ttftlens-phase prefill", `a;dur="x"`, "server-timing ,,;;")
	f.Fuzz(func(t *testing.T, comment, header, comment2 string) {
		for _, kind := range Kinds {
			var r Report
			tl := newTL()
			r.Begin(kind, headers(map[string]string{FaultHeader: comment2}))
			r.Headers(headers(map[string]string{"Server-Timing": header}), tl)
			r.Comment([]byte(comment), tl)
			r.Comment([]byte(comment2), tl)
			r.End(headers(nil), tl, 0)
			if src := r.Source(); src != "" && src != SourceServerTiming && src != kind {
				t.Fatalf("%s: source %q", kind, src)
			}
			_ = r.Phase(true, tl)
		}
	})
}

// TestReportWholeDecode: a whole body's first token came after the engine's
// decode, which the inferred queue leaves out.
func TestReportWholeDecode(t *testing.T) {
	const ms = time.Millisecond
	body := `{"message":{"role":"assistant","content":"hi"},"done":true,"done_reason":"stop",` +
		`"load_duration":2000000,"prompt_eval_duration":30000000,"eval_duration":50000000}`
	stream := `{"message":{"role":"assistant","content":"hi"},"done":false}`
	tests := []struct {
		name   string
		events []string
		queue  time.Duration
	}{
		{"whole body", []string{body}, 100*ms - 2*ms - 30*ms - 50*ms},
		{"stream: decode after the first token", []string{stream, body}, 100*ms - 2*ms - 30*ms},
	}
	for _, tc := range tests {
		var r Report
		tl := newTL()
		tl.MarkAt(stages.UpstreamSent, 0)
		r.Begin(KindOllama, headers(nil))
		for _, e := range tc.events {
			if ev := r.Event([]byte(e), tl); ev.Content {
				tl.MarkAt(stages.FirstToken, 100*ms)
			}
		}
		r.End(headers(nil), tl, 0)
		if q, _ := tl.Engine(stages.EngineQueue); q != tc.queue || !tl.Inferred().Has(stages.EngineQueue) {
			t.Errorf("%s: queue %v (inferred %b), want %v inferred", tc.name, q, tl.Inferred(), tc.queue)
		}
	}
}
