package refengine

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The span shapes the engine can report its timing in, as the stock engines
// do (Config.SpanShape). Attribute names and values follow each engine's
// source; proxy/engines/testdata/spans/README.md cites them.
const (
	// SpanVLLM is vLLM's llm_request span (vllm/v1/engine/output_processor.py,
	// do_tracing): kind SERVER, from arrival, gen_ai.latency.* in seconds.
	SpanVLLM = "vllm"
	// SpanSGLang is SGLang's request trace: a root span " Req <rid>" with
	// gen_ai.latency.* (its prefill from dispatch, the queue in it, and no
	// time_in_queue), a thread span under it and the prefill_waiting stage
	// span under that (python/sglang/srt/observability).
	SpanSGLang = "sglang"
	// SpanTGI is TGI's handler span (router/src/server.rs): chat_completions
	// with validation_time, queue_time, inference_time, total_time and
	// time_per_token as Rust Duration Debug strings, and the HTTP layer's
	// sibling span without them.
	SpanTGI = "tgi"
)

// SpanShapes lists the shapes Config.SpanShape accepts.
var SpanShapes = []string{SpanVLLM, SpanSGLang, SpanTGI}

// inBand reports whether the engine sends its timing in its responses
// (PROTOCOL.md) rather than in spans.
func (s *Server) inBand() bool { return s.cfg.SpanShape == "" }

// ownedBy is the owner /v1/models names: the engine it plays, so that a
// proxy identifies it as that engine (proxy/engines/detect.go), else
// "ttftlens".
func (s *Server) ownedBy() string {
	switch s.cfg.SpanShape {
	case SpanVLLM, SpanSGLang:
		return s.cfg.SpanShape
	}
	return "ttftlens"
}

// exportSpans reports t as the configured engine would: only for a request
// it finished (stop or length; the engines send no span, or not reliably,
// for an aborted one), parented to the traceparent the request carried.
func (s *Server) exportSpans(t *Truth) {
	if s.cfg.SpanShape == "" || (t.FinishReason != "stop" && t.FinishReason != "length") {
		return
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": t.Traceparent})
	tr := s.cfg.Tracer.Tracer("github.com/ttftlens/ttftlens/refengine")
	start, end := t.Received, t.Received.Add(t.E2E)
	prep := t.Recv + t.Tokenize + t.Media // arrival to the scheduler's queue
	prefill := t.Prefill + t.FirstDecode  // scheduled to the first token
	// vLLM and SGLang stamp the first token where their API server process
	// takes it from the engine, after the hand-off: here, when the handler
	// has it to write (Emit after the sampling).
	ttft := t.FirstTokenSampled + t.Emit
	tokens := []attribute.KeyValue{
		attribute.Int("gen_ai.usage.prompt_tokens", t.PromptTokens),
		attribute.Int("gen_ai.usage.completion_tokens", t.CompletionTokens),
		attribute.String("gen_ai.response.finish_reasons", strconv.Quote(t.FinishReason)),
		attribute.String("gen_ai.request.id", t.RequestID),
	}
	switch s.cfg.SpanShape {
	case SpanVLLM:
		_, sp := tr.Start(ctx, "llm_request", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start))
		sp.SetAttributes(append(tokens,
			attribute.Float64("gen_ai.latency.time_in_queue", t.Queue.Seconds()),
			attribute.Float64("gen_ai.latency.time_in_model_prefill", prefill.Seconds()),
			attribute.Float64("gen_ai.latency.time_to_first_token", ttft.Seconds()),
			attribute.Float64("gen_ai.latency.e2e", t.E2E.Seconds()),
		)...)
		sp.End(trace.WithTimestamp(end))
	case SpanSGLang:
		rctx, root := tr.Start(ctx, " Req "+short(t.RequestID), trace.WithTimestamp(start))
		root.SetAttributes(append(tokens,
			attribute.Float64("gen_ai.latency.time_in_model_prefill", (t.Queue+prefill).Seconds()),
			attribute.Float64("gen_ai.latency.time_to_first_token", ttft.Seconds()),
			attribute.Float64("gen_ai.latency.e2e", t.E2E.Seconds()),
		)...)
		queued := start.Add(prep)
		tctx, thread := tr.Start(rctx, "Scheduler [TP 0]", trace.WithTimestamp(queued))
		_, waiting := tr.Start(tctx, "prefill_waiting", trace.WithTimestamp(queued))
		waiting.End(trace.WithTimestamp(queued.Add(t.Queue)))
		_, forward := tr.Start(tctx, "prefill_forward", trace.WithTimestamp(queued.Add(t.Queue)))
		forward.End(trace.WithTimestamp(queued.Add(t.Queue + prefill)))
		thread.End(trace.WithTimestamp(end))
		root.End(trace.WithTimestamp(end))
	case SpanTGI:
		_, http := tr.Start(ctx, "POST /v1/chat/completions", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start))
		http.End(trace.WithTimestamp(end))
		_, sp := tr.Start(ctx, "chat_completions", trace.WithTimestamp(start))
		inference := t.E2E - prep - t.Queue
		perToken := time.Duration(0)
		if t.CompletionTokens > 0 {
			perToken = inference / time.Duration(t.CompletionTokens)
		}
		sp.SetAttributes(
			attribute.String("validation_time", rustDuration(prep)),
			attribute.String("queue_time", rustDuration(t.Queue)),
			attribute.String("inference_time", rustDuration(inference)),
			attribute.String("total_time", rustDuration(t.E2E)),
			attribute.String("time_per_token", rustDuration(perToken)),
		)
		sp.End(trace.WithTimestamp(end))
	}
}

// short is the first 8 characters of a request id, as SGLang names its
// root span after its rid's.
func short(id string) string { return id[:min(len(id), 8)] }

// rustDuration writes d as Rust's Duration Debug form does: the largest
// unit (s, ms, µs, ns) in which it is at least 1, with its fraction
// ("12.345678ms", "1.2s", "345.6µs", "0ns").
func rustDuration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
	case d >= time.Millisecond:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64) + "ms"
	case d >= time.Microsecond:
		return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', -1, 64) + "µs"
	}
	return fmt.Sprintf("%dns", max(d, 0))
}
