package engines

import (
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/refengine"
	"github.com/ttftlens/ttftlens/stages"
)

func TestFaultHeaderIsTheEngines(t *testing.T) {
	if FaultHeader != refengine.FaultHeader {
		t.Fatalf("FaultHeader %q, the engine reads %q", FaultHeader, refengine.FaultHeader)
	}
}

func TestWithholdsHeaders(t *testing.T) {
	tests := []struct {
		faults string
		want   bool
	}{
		{"", false},
		{"hold_headers", true},
		{"queue_delay=3s, hold_headers", true},
		{"hold_headers,slow_media=1s", true},
		{"hold_headersx", false},
		{"queue_delay=3s", false},
	}
	for _, tt := range tests {
		if got := WithholdsHeaders([]byte(tt.faults)); got != tt.want {
			t.Errorf("WithholdsHeaders(%q) = %v, want %v", tt.faults, got, tt.want)
		}
	}
}

func TestParsePhase(t *testing.T) {
	tests := []struct {
		v    string
		want endreason.Phase
	}{
		{"queued", endreason.PhaseQueued},
		{"prefill", endreason.PhasePrefill},
		{"decoding", endreason.PhaseNone}, // not a progress value
		{"", endreason.PhaseNone},
	}
	for _, tt := range tests {
		if got := ParsePhase([]byte(tt.v)); got != tt.want {
			t.Errorf("ParsePhase(%q) = %v, want %v", tt.v, got, tt.want)
		}
	}
}

// TestServerTimingCommentMapsParts reads the reference engine's in-band
// comment through a Report and checks where each part lands in the
// breakdown: recv in preparation, emit in first_decode, a part the reader
// does not know nowhere, and the proxy's own send in transport.
func TestServerTimingCommentMapsParts(t *testing.T) {
	const us = time.Microsecond
	type st = [stages.NumStages]time.Duration
	tests := []struct {
		name    string
		comment string
		want    st
	}{
		{"recv and emit", "server-timing queue;dur=0.1, tokenize;dur=0.2, media;dur=0, prefill;dur=2, sync;dur=0, decode1;dur=0.01, recv;dur=0.04, emit;dur=0.03",
			st{stages.Queue: 100 * us, stages.Preparation: 240 * us, stages.Prefill: 2000 * us, stages.FirstDecode: 40 * us,
				stages.Unattributed: 20 * us, stages.Transport: 60 * us}},
		{"an engine without recv and emit", "server-timing queue;dur=0.1, tokenize;dur=0.2, media;dur=0, prefill;dur=2, sync;dur=0, decode1;dur=0.01",
			st{stages.Queue: 100 * us, stages.Preparation: 200 * us, stages.Prefill: 2000 * us, stages.FirstDecode: 10 * us,
				stages.Unattributed: 90 * us, stages.Transport: 60 * us}},
		{"a part the reader does not know", "server-timing queue;dur=0.1, tokenize;dur=0.2, media;dur=0, prefill;dur=2, sync;dur=0, decode1;dur=0.01, recv;dur=0.04, detokenize;dur=0.02, emit;dur=0.03",
			st{stages.Queue: 100 * us, stages.Preparation: 240 * us, stages.Prefill: 2000 * us, stages.FirstDecode: 40 * us,
				stages.Unattributed: 20 * us, stages.Transport: 60 * us}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tl stages.Timeline
			tl.Start(func() int64 { return 0 }, time.Time{})
			at := tl.MarkAt
			// The upstream window: admitted at 0, 2.45 ms to the first token,
			// of which the proxy spent 50 µs connecting and writing; 10 µs
			// to flush the first token.
			at(stages.GatewayDone, 0)
			at(stages.Routed, 0)
			at(stages.Admitted, 0)
			at(stages.UpstreamConnected, 20*us)
			at(stages.UpstreamSent, 50*us)
			at(stages.FirstToken, 2450*us)
			at(stages.FirstTokenFlushed, 2460*us)
			var r Report
			r.Begin(KindReference, func(string) []byte { return nil })
			if !r.Comment([]byte(tt.comment), &tl) || r.Source() != SourceServerTiming {
				t.Fatalf("comment not read as the engine's timing (source %q)", r.Source())
			}
			bd := tl.Breakdown()
			if bd.Stages != tt.want || bd.Inconsistent {
				t.Errorf("stages %v (inconsistent %v), want %v", bd.Stages, bd.Inconsistent, tt.want)
			}
		})
	}
}
