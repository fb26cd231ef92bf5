package gateway

import (
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
)

func TestDeadlines(t *testing.T) {
	s := time.Second
	flags := Deadlines{FirstToken: 120 * s, Total: 0}
	route := &Route{FirstTokenDeadline: 30 * s, TotalDeadline: 600 * s, MaxFirstTokenDeadline: 60 * s}
	bare := &Route{}                             // the flags apply
	bounded := &Route{MaxTotalDeadline: 900 * s} // no total deadline, but a header may ask up to 900s
	tests := []struct {
		name        string
		r           *Route
		total, ttft string
		want        Deadlines
		param       string
	}{
		{"route defaults", route, "", "", Deadlines{FirstToken: 30 * s, Total: 600 * s}, ""},
		{"shorten both", route, "1500", "250", Deadlines{FirstToken: 250 * time.Millisecond, Total: 1500 * time.Millisecond}, ""},
		{"lengthen ttft within bound", route, "", "45000", Deadlines{FirstToken: 45 * s, Total: 600 * s}, ""},
		{"lengthen ttft past bound clamps", route, "", "90000", Deadlines{FirstToken: 60 * s, Total: 600 * s}, ""},
		{"total has no bound: only shorten", route, "700000", "", Deadlines{FirstToken: 30 * s, Total: 600 * s}, ""},
		{"flags when the route sets none", bare, "", "", flags, ""},
		{"header under no total deadline", bare, "5000", "", Deadlines{FirstToken: 120 * s, Total: 5 * s}, ""},
		{"bound without a deadline", bounded, "2000000", "", Deadlines{FirstToken: 120 * s, Total: 900 * s}, ""},
		{"zero", route, "0", "", Deadlines{}, HeaderDeadline},
		{"negative", route, "", "-5", Deadlines{}, HeaderTTFTDeadline},
		{"not a number", route, "1e3", "", Deadlines{}, HeaderDeadline},
		{"overflow", route, "99999999999999999999999", "", Deadlines{}, HeaderDeadline},
		{"spaces", route, " 10", "", Deadlines{}, HeaderDeadline},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var total, ttft []byte
			if tt.total != "" {
				total = []byte(tt.total)
			}
			if tt.ttft != "" {
				ttft = []byte(tt.ttft)
			}
			got, rej := tt.r.Deadlines(flags, total, ttft)
			if tt.param != "" {
				if rej == nil || rej.Param != tt.param || rej.Status != 400 || rej.Detail != endreason.DetailInvalidParam {
					t.Fatalf("got %+v %+v, want a rejection of %s", got, rej, tt.param)
				}
				return
			}
			if rej != nil || got != tt.want {
				t.Fatalf("got %+v %+v, want %+v", got, rej, tt.want)
			}
		})
	}
}
