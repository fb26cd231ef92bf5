package stages

import "time"

// Stage is one part of time to first token (ARCHITECTURE.md, "The request
// clock and the stages").
type Stage uint8

// The stages, in the order they happen. They add up exactly to the
// proxy-observed TTFT (FirstTokenFlushed - Received).
const (
	Gateway      Stage = iota // GatewayDone - Received
	Route                     // Routed - GatewayDone
	Queue                     // (Admitted - Routed) + engine queue + engine load + engine unread
	Preparation               // engine recv + tokenize + media
	Prefill                   // engine prefill
	FirstDecode               // engine first decode + emit
	Unattributed              // (FirstTokenArrived - Admitted) minus the engine's parts and the proxy's upstream send
	Transport                 // the proxy's upstream send (UpstreamSent - Admitted) + (FirstTokenFlushed - FirstTokenArrived)
	NumStages
)

var stageNames = [NumStages]string{
	"gateway", "route", "queue", "preparation", "prefill", "first_decode", "unattributed", "transport",
}

func (s Stage) String() string {
	if s < NumStages {
		return stageNames[s]
	}
	return "stage?"
}

// Breakdown is TTFT split into stages.
type Breakdown struct {
	Stages [NumStages]time.Duration
	// TTFT is FirstTokenFlushed - Received; zero when OK is false.
	TTFT time.Duration
	// OK reports that a first token reached the client, so the stages exist.
	OK bool
	// Parts are the engine durations as carved out of the upstream window
	// (clamped to fit; zero when not recorded): how much of its stage
	// (EngineDur.Stage) each is. Sync, inside Prefill, is not carved.
	Parts [NumEngineDurs]time.Duration
	// Unsplit reports that the engine reported nothing: the upstream window
	// (Admitted to FirstTokenArrived) past the proxy's send is all in
	// Unattributed, but for what the proxy inferred (Timeline.Inferred).
	Unsplit bool
	// Inconsistent reports that engine durations did not fit the window the
	// proxy observed and were clamped (raw values stay in the Timeline).
	Inconsistent bool
}

// Breakdown derives the stages. It never yields a negative stage, and the
// stages always sum to TTFT exactly.
func (t *Timeline) Breakdown() Breakdown {
	var b Breakdown
	if !t.Has(FirstTokenFlushed) {
		return b
	}
	b.OK = true
	// A clock that stepped back could put the mark before Received.
	b.TTFT = max(t.marks[FirstTokenFlushed], 0)

	// Proxy marks: take each as at least the previous one, so clock oddities
	// (a mark recorded out of order) cannot produce a negative stage.
	prev := time.Duration(0)
	seq := func(m Mark) time.Duration {
		v := t.at(m)
		if v < prev {
			v = prev
		}
		if v > b.TTFT {
			v = b.TTFT
		}
		prev = v
		return v
	}
	gatewayDone, routed, admitted := seq(GatewayDone), seq(Routed), seq(Admitted)
	firstToken := seq(FirstToken)
	// The upstream window ends when the first token's bytes arrived; from
	// there on the proxy was parsing and handing out what it already had.
	arrived := firstToken
	if a, ok := t.At(FirstTokenArrived); ok {
		arrived = min(max(a, admitted), firstToken)
	}
	b.Stages[Gateway] = gatewayDone
	b.Stages[Route] = routed - gatewayDone
	b.Stages[Queue] = admitted - routed
	b.Stages[Transport] = b.TTFT - arrived

	// Engine parts are carved out of the upstream window in order; a part that
	// does not fit is clamped and the breakdown flagged.
	window := arrived - admitted
	b.Unsplit = !t.EngineReported()
	take := func(d EngineDur) time.Duration {
		v, ok := t.Engine(d)
		if !ok {
			return 0
		}
		if v < 0 {
			b.Inconsistent = true
			v = 0
		}
		if v > window {
			b.Inconsistent = true
			v = window
		}
		window -= v
		b.Parts[d] = v
		return v
	}
	b.Stages[Queue] += take(EngineLoad)
	b.Stages[Queue] += take(EngineQueue)
	b.Stages[Queue] += take(EngineUnread)
	b.Stages[Preparation] = take(EngineTokenize)
	b.Stages[Preparation] += take(EngineMedia)
	b.Stages[Prefill] = take(EnginePrefill)
	b.Stages[FirstDecode] = take(EngineFirstDecode)
	b.Stages[Preparation] += take(EngineRecv)
	b.Stages[FirstDecode] += take(EngineEmit)

	// The proxy's own side of the hop (connecting, writing the request)
	// comes from what the engine's parts leave: its mark is taken when the
	// write returns, which may be after the engine already had the request.
	send := min(max(t.at(UpstreamSent)-admitted, 0), window)
	b.Stages[Transport] += send
	b.Stages[Unattributed] = window - send
	if s, ok := t.Engine(EngineSync); ok && (s < 0 || s > b.Stages[Prefill]) {
		b.Inconsistent = true
	}
	return b
}
