// Package endreason is the closed set of reasons a request ends, with the
// details that refine them, and the one function that decides them from
// observed facts. It never looks at error text. It imports only the
// standard library.
package endreason

import "slices"

// Reason is why a request ended.
type Reason uint8

// The reasons. The zero value is not a reason: every finished record has one.
const (
	Stop               Reason = iota + 1 // natural end: finish_reason stop or tool_calls
	Length                               // the token budget ran out
	PolicyBlock                          // our auth or quota, upstream 401/403/429, content_filter
	InvalidRequest                       // our parameter validation, upstream 4xx
	ClientCancel                         // the client went away
	Deadline                             // a first-token or total deadline fired
	WorkerFailure                        // upstream 5xx, error event, engine error/abort, no upstream
	UpstreamDisconnect                   // upstream closed or reset without a finish
	numReasons
)

var reasonNames = [numReasons]string{
	"", "stop", "length", "policy_block", "invalid_request", "client_cancel", "deadline",
	"worker_failure", "upstream_disconnect",
}

func (r Reason) String() string {
	if r > 0 && r < numReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// All returns every reason, for pre-creating metric series.
func All() []Reason {
	out := make([]Reason, 0, numReasons-1)
	for r := Stop; r < numReasons; r++ {
		out = append(out, r)
	}
	return out
}

// Phase is where a request was when the client left.
type Phase uint8

// The phases. PhaseNone is used for every reason but ClientCancel. Between
// admission and the first token the engine's own word decides (the
// reference engine's progress comments, refengine/PROTOCOL.md); an engine
// that says nothing leaves PhaseUpstream.
const (
	PhaseNone      Phase = iota
	PhaseQueued          // before our admission (gateway, route, our queue), or in the engine's queue
	PhasePreparing       // in the engine's preparation (tokenizer, media fetch)
	PhasePrefill         // in the engine's prefill
	PhaseUpstream        // admitted, no token yet, and the engine does not say where it was
	PhaseDecoding        // after the first token
	NumPhases
)

var phaseNames = [NumPhases]string{"", "queued", "preparing", "prefill", "upstream", "decoding"}

func (p Phase) String() string {
	if p < NumPhases {
		return phaseNames[p]
	}
	return "phase?"
}

// Detail is a short machine-readable refinement of a Reason.
type Detail string

// The details. Each belongs to one reason; docs/record.md's table lists them.
const (
	DetailStop                 Detail = "finish_stop"
	DetailToolCalls            Detail = "finish_tool_calls"
	DetailDoneOnly             Detail = "done_without_finish_reason"
	DetailComplete             Detail = "response_complete"
	DetailNoDoneMarker         Detail = "finish_without_done"
	DetailLength               Detail = "finish_length"
	DetailContentFilter        Detail = "content_filter"
	DetailUpstreamAuth         Detail = "upstream_unauthorized"
	DetailUpstreamLimited      Detail = "upstream_rate_limited"
	DetailUpstreamRejected     Detail = "upstream_rejected_request"
	DetailClientClosed         Detail = "client_closed"
	DetailTTFTDeadline         Detail = "ttft_deadline"
	DetailTotalDeadline        Detail = "total_deadline"
	DetailIdleDeadline         Detail = "idle_deadline"
	DetailShutdown             Detail = "shutdown"            // the proxy stopped before the response ended
	DetailSLOUnmeetable        Detail = "ttft_slo_unmeetable" // gateway: no upstream predicted to meet the request's TTFT SLO
	DetailClientWriteStall     Detail = "client_write_stall"  // the client stopped reading the stream
	DetailConnectFailed        Detail = "connect_failed"
	DetailUpstream5xx          Detail = "upstream_5xx"
	DetailErrorEvent           Detail = "error_event"
	DetailEngineError          Detail = "engine_error"
	DetailEngineAbort          Detail = "engine_abort"
	DetailEventTooLarge        Detail = "event_too_large"
	DetailMalformedEvent       Detail = "malformed_event"
	DetailInvalidUTF8          Detail = "invalid_utf8"
	DetailBadContentType       Detail = "unexpected_content_type"
	DetailUpstreamBodyTooLarge Detail = "upstream_body_too_large"    // the upstream's non-streamed response body over our limit
	DetailHeadersTooLarge      Detail = "upstream_headers_too_large" // the upstream's response headers over our limit
	DetailMalformedHeaders     Detail = "malformed_response_headers" // the upstream's status line or headers could not be parsed
	DetailResetMidStream       Detail = "reset_mid_stream"
	DetailTruncatedBody        Detail = "truncated_body"
	DetailEOFWithoutDone       Detail = "eof_without_done"
	DetailReadFailed           Detail = "upstream_read_failed"
	DetailClosedBeforeResp     Detail = "closed_before_response"
	DetailMalformedRequest     Detail = "malformed_request_body"
	DetailMissingKey           Detail = "missing_api_key"        // gateway: no or non-Bearer Authorization
	DetailInvalidKey           Detail = "invalid_api_key"        // gateway: a key that is not configured
	DetailQuotaExceeded        Detail = "quota_exceeded"         // gateway: the key's requests or tokens per interval
	DetailQuotaUnavailable     Detail = "quota_unavailable"      // gateway: the shared quota backend failed and on_failure is closed
	DetailRequestBodyTooLarge  Detail = "request_body_too_large" // gateway: the client's request body over max_body_bytes
	DetailUnknownModel         Detail = "unknown_model"          // gateway: no route for the model
	DetailInvalidParam         Detail = "invalid_parameter"      // gateway: a parameter out of range or of the wrong type
	DetailNoHealthy            Detail = "no_healthy_upstream"    // gateway: every upstream of the pool unhealthy or ejected
	DetailQueueFull            Detail = "queue_full"             // gateway: the upstream's admission queue is full
	DetailQueueTimeout         Detail = "queue_timeout"          // gateway: waited queue_max_wait without a slot
	DetailProxyPanic           Detail = "proxy_panic"
	// The front door, where the request's body is read.
	DetailBodyMemoryFull  Detail = "body_memory_full"     // the bodies of the requests in flight hold the whole body memory budget
	DetailBodyReadTimeout Detail = "request_body_timeout" // the client did not send its whole body within the read timeout
)

// detailReasons maps every detail to the one reason it refines. A detail
// added above must be added here (a test checks Classify against it).
var detailReasons = map[Detail]Reason{
	DetailStop:                 Stop,
	DetailToolCalls:            Stop,
	DetailDoneOnly:             Stop,
	DetailComplete:             Stop,
	DetailNoDoneMarker:         Stop,
	DetailLength:               Length,
	DetailContentFilter:        PolicyBlock,
	DetailUpstreamAuth:         PolicyBlock,
	DetailUpstreamLimited:      PolicyBlock,
	DetailUpstreamRejected:     InvalidRequest,
	DetailMalformedRequest:     InvalidRequest,
	DetailMissingKey:           PolicyBlock,
	DetailInvalidKey:           PolicyBlock,
	DetailQuotaExceeded:        PolicyBlock,
	DetailRequestBodyTooLarge:  InvalidRequest,
	DetailUnknownModel:         InvalidRequest,
	DetailInvalidParam:         InvalidRequest,
	DetailQuotaUnavailable:     WorkerFailure,
	DetailNoHealthy:            WorkerFailure,
	DetailQueueFull:            WorkerFailure,
	DetailQueueTimeout:         WorkerFailure,
	DetailBodyMemoryFull:       WorkerFailure,
	DetailBodyReadTimeout:      ClientCancel,
	DetailClientClosed:         ClientCancel,
	DetailTTFTDeadline:         Deadline,
	DetailTotalDeadline:        Deadline,
	DetailIdleDeadline:         Deadline,
	DetailShutdown:             Deadline,
	DetailSLOUnmeetable:        Deadline,
	DetailClientWriteStall:     ClientCancel,
	DetailConnectFailed:        WorkerFailure,
	DetailUpstream5xx:          WorkerFailure,
	DetailErrorEvent:           WorkerFailure,
	DetailEngineError:          WorkerFailure,
	DetailEngineAbort:          WorkerFailure,
	DetailEventTooLarge:        WorkerFailure,
	DetailMalformedEvent:       WorkerFailure,
	DetailInvalidUTF8:          WorkerFailure,
	DetailBadContentType:       WorkerFailure,
	DetailUpstreamBodyTooLarge: WorkerFailure,
	DetailHeadersTooLarge:      WorkerFailure,
	DetailMalformedHeaders:     WorkerFailure,
	DetailProxyPanic:           WorkerFailure,
	DetailResetMidStream:       UpstreamDisconnect,
	DetailTruncatedBody:        UpstreamDisconnect,
	DetailEOFWithoutDone:       UpstreamDisconnect,
	DetailReadFailed:           UpstreamDisconnect,
	DetailClosedBeforeResp:     UpstreamDisconnect,
}

// Reason returns the reason d refines, false for an unknown detail.
func (d Detail) Reason() (Reason, bool) {
	r, ok := detailReasons[d]
	return r, ok
}

// Details returns r's details, sorted, for pre-creating metric series.
func Details(r Reason) []Detail {
	var out []Detail
	for d, dr := range detailReasons {
		if dr == r {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}
