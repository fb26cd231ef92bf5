package engines

import (
	"testing"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/engine"
)

func TestFaultHeaderIsTheEngines(t *testing.T) {
	if FaultHeader != engine.FaultHeader {
		t.Fatalf("FaultHeader %q, the engine reads %q", FaultHeader, engine.FaultHeader)
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
