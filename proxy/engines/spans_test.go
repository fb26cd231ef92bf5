package engines

import (
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/ttftlens/ttftlens/stages"
)

func kv(k string, v *commonpb.AnyValue) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: v}
}
func dv(f float64) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: f}}
}
func sv(s string) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
}
func iv(i int64) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: i}}
}

func TestReadSpan(t *testing.T) {
	tests := []struct {
		name    string
		attrs   []*commonpb.KeyValue
		ok      bool
		shape   SpanShape
		queue   time.Duration
		prep    time.Duration
		prompt  int
		prefill time.Duration
	}{
		{"vllm", []*commonpb.KeyValue{kv(attrQueue, dv(0.25)), kv(attrPrefill, dv(0.5)), kv(attrPrompt, iv(7))}, true, ShapeGenAI, 250 * time.Millisecond, 0, 7, 500 * time.Millisecond},
		{"integer seconds", []*commonpb.KeyValue{kv(attrQueue, iv(2))}, true, ShapeGenAI, 2 * time.Second, 0, -1, 0},
		{"tgi", []*commonpb.KeyValue{kv(attrTGIQueue, sv("12.5ms")), kv(attrTGIValidation, sv("345.6µs"))}, true, ShapeTGI, 12500 * time.Microsecond, 345600 * time.Nanosecond, -1, 0},
		{"tgi greek mu and us", []*commonpb.KeyValue{kv(attrTGIQueue, sv("3μs")), kv(attrTGIValidation, sv("4us"))}, true, ShapeTGI, 3 * time.Microsecond, 4 * time.Microsecond, -1, 0},
		{"tgi inference only", []*commonpb.KeyValue{kv(attrTGIInference, sv("1.2s"))}, true, ShapeTGI, 0, 0, -1, 0},
		{"prompt as JSON string", []*commonpb.KeyValue{kv(attrQueue, dv(0)), kv(attrPrompt, sv("12"))}, true, ShapeGenAI, 0, 0, 12, 0},
		{"no timing", []*commonpb.KeyValue{kv("http.route", sv("/v1/chat"))}, false, ShapeNone, 0, 0, -1, 0},
		{"NaN and huge are not read", []*commonpb.KeyValue{kv(attrQueue, dv(1e300)), kv(attrPrefill, sv("x"))}, false, ShapeNone, 0, 0, -1, 0},
		{"negative rust duration", []*commonpb.KeyValue{kv(attrTGIQueue, sv("-1ms"))}, false, ShapeNone, 0, 0, -1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, ok := ReadSpan(&tracepb.Span{Attributes: tt.attrs})
			if ok != tt.ok || rep.Shape != tt.shape || rep.Queue != tt.queue || rep.Prep != tt.prep || rep.PromptTokens != tt.prompt || rep.Prefill != tt.prefill {
				t.Errorf("got ok %v %+v", ok, rep)
			}
		})
	}
}

// FuzzReadSpan: any span decodes to durations within a day, and applying
// them keeps the breakdown's identity.
func FuzzReadSpan(f *testing.F) {
	seed, _ := proto.Marshal(&tracepb.Span{Attributes: []*commonpb.KeyValue{kv(attrQueue, dv(0.1)), kv(attrPrefill, dv(0.2)), kv(attrTTFT, dv(0.4))}})
	f.Add(seed)
	tgi, _ := proto.Marshal(&tracepb.Span{Attributes: []*commonpb.KeyValue{kv(attrTGIQueue, sv("1.5ms")), kv(attrTGIValidation, sv("2s"))}})
	f.Add(tgi)
	f.Fuzz(func(t *testing.T, b []byte) {
		var sp tracepb.Span
		if proto.Unmarshal(b, &sp) != nil {
			return
		}
		rep, ok := ReadSpan(&sp)
		var st StageSpans
		ReadStageSpan(&sp, &st)
		for _, d := range []time.Duration{rep.Queue, rep.Prefill, rep.TTFT, rep.E2E, rep.Prep, st.Queue} {
			if d < -24*time.Hour || d > 24*time.Hour {
				t.Fatalf("duration %v out of bounds", d)
			}
		}
		if !ok {
			return
		}
		var tl stages.Timeline
		c := int64(0)
		tl.Start(func() int64 { return c }, time.Time{})
		tl.MarkAt(stages.Admitted, time.Millisecond)
		tl.MarkAt(stages.UpstreamSent, 2*time.Millisecond)
		tl.MarkAt(stages.FirstToken, time.Second)
		tl.MarkAt(stages.FirstTokenFlushed, time.Second+time.Millisecond)
		rep.Apply(&tl, st)
		bd := tl.Breakdown()
		var sum time.Duration
		for _, d := range bd.Stages {
			if d < 0 {
				t.Fatalf("negative stage in %+v", bd)
			}
			sum += d
		}
		if sum != bd.TTFT {
			t.Fatalf("stages sum %v, TTFT %v", sum, bd.TTFT)
		}
	})
}
