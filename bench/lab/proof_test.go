package lab

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ttftlens/ttftlens/internal/leaktest"

	"github.com/ttftlens/ttftlens/bench"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leaktest.FasthttpSleepers...)
}

// TestProofCauses is the proof that the breakdown names the right cause:
// for each cause of a slow first token, a baseline run and an injected run
// through the real engine and proxy, joined by the probe, must show
//
//  1. the injected stage as the one whose median grew the most,
//  2. that stage holding at least 80% of the growth of the median
//     client-seen TTFT,
//  3. unattributed under 5% of the injected median TTFT whenever the
//     engine can report the injected time (all but upstream buffering,
//     where the engine's report is itself held back: there the proof is
//     the buffering flag on every record and the growth landing in
//     unattributed),
//  4. the proxy's own clock agreeing, so that the proof does not rest on
//     the engine's word alone: the upstream window the proxy timed (routing
//     to the first token handed out) carries at least 80% of the added
//     time for a cause upstream of it and at most 10% for one downstream,
//     and on every injected request the engine's reported parts fit inside
//     the window the proxy timed for it (no engine_report_inconsistent).
//
// Where the stage is one the engine splits (preparation: tokenize or
// media; prefill: sync), the engine's own duration must carry at least
// 80% of the stage's growth too. Each scenario runs once: no retries.
func TestProofCauses(t *testing.T) {
	for _, sc := range Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			for _, f := range proveCause(t, sc) {
				t.Error(f)
			}
		})
	}
}

// proveCause runs a scenario and returns the assertions it failed.
func proveCause(t *testing.T, sc Scenario) []string {
	t.Helper()
	start := time.Now()
	d, err := sc.Run(context.Background())
	if err != nil {
		return []string{err.Error()}
	}
	var b strings.Builder
	d.WriteText(&b)
	t.Logf("%s(took %v)", b.String(), time.Since(start).Round(time.Millisecond))
	var fails []string
	fail := func(format string, args ...any) { fails = append(fails, fmt.Sprintf(format, args...)) }
	for _, s := range []bench.Summary{d.Baseline, d.Injected} {
		if s.Errors != 0 || s.Joined != s.Requests {
			fail("%d errors, %d of %d joined: %+v", s.Errors, s.Joined, s.Requests, s.EndReasons)
		}
	}
	if d.Added <= 0 {
		return append(fails, fmt.Sprintf("median client TTFT did not grow: %v", d.Added))
	}
	if d.Dominant != sc.Expect {
		fail("dominant part %s (%v), want %s (%v)", d.Dominant, d.Deltas[d.Dominant], sc.Expect, d.Deltas[sc.Expect])
	}
	if d.Share < 0.8 {
		fail("%s holds %.0f%% of the added %v, want >= 80%%", d.Dominant, 100*d.Share, d.Added)
	}
	if sc.ExpectEngine != "" {
		if got, stage := d.EngineDeltas[sc.ExpectEngine], d.Deltas[sc.Expect]; float64(got) < 0.8*float64(stage) {
			fail("engine %s grew %v of the stage's %v, want >= 80%%", sc.ExpectEngine, got, stage)
		}
	}
	if !sc.Unsplit && d.Unattributed >= 0.05 {
		fail("unattributed is %.1f%% of the injected median TTFT, want < 5%%", 100*d.Unattributed)
	}
	fails = append(fails, proxyClockAgrees(sc, d)...)
	if sc.Buffered {
		if d.Buffered != d.Joined || !slices.Contains(d.Buffering, "burst") {
			fail("%d of %d records flagged buffered (%v), want all with burst", d.Buffered, d.Joined, d.Buffering)
		}
	} else if d.Buffered != 0 {
		fail("%d of %d records flagged buffered (%v) with no buffering injected", d.Buffered, d.Joined, d.Buffering)
	}
	return fails
}

// proxyClockAgrees checks the diagnosis against the proxy's own marks
// (assertion 4 of TestProofCauses).
func proxyClockAgrees(sc Scenario, d *Diagnosis) []string {
	var fails []string
	fail := func(format string, args ...any) { fails = append(fails, fmt.Sprintf(format, args...)) }
	w := d.WindowDelta
	if sc.Expect == bench.Outside {
		if w > d.Added/10 {
			fail("the proxy's upstream window grew %v of the added %v, want <= 10%% for a cause outside it", w, d.Added)
		}
		return fails
	}
	if float64(w) < 0.8*float64(d.Added) {
		fail("the proxy's upstream window grew %v of the added %v, want >= 80%%", w, d.Added)
	}
	if d.Inconsistent > 0 {
		fail("%d of %d injected records have an engine report that does not fit the proxy's window", d.Inconsistent, d.Joined)
	}
	return fails
}

// TestProofEndReasons produces each end reason through the engine and the
// proxy and checks the joined record and what the client saw.
func TestProofEndReasons(t *testing.T) {
	for _, c := range EndCases() {
		t.Run(c.Name, func(t *testing.T) {
			run, err := c.Run(context.Background(), 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range run.Results {
				if r.Record == nil {
					t.Fatalf("request %s: no record joined (%s)", r.ID, r.JoinErr)
				}
				if r.Record.EndReason != c.Reason || r.Record.EndDetail != c.Detail {
					t.Errorf("request %s: record %s/%s, want %s/%s", r.ID, r.Record.EndReason, r.Record.EndDetail, c.Reason, c.Detail)
				}
				if r.End != c.ClientEnd {
					t.Errorf("request %s: client saw %q (%s), want %q", r.ID, r.End, r.Err, c.ClientEnd)
				}
				// The client leaves while the engine holds the request in
				// its queue, and the engine says so.
				if c.Reason == "client_cancel" && r.Record.Phase != "queued" {
					t.Errorf("request %s: cancel phase %q, want queued", r.ID, r.Record.Phase)
				}
			}
			if len(run.Results) != 2 {
				t.Errorf("%d results, want 2", len(run.Results))
			}
		})
	}
}
