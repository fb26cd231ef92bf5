package endreason

// Finish is the finish reason an upstream reported, normalised across
// engines (OpenAI, vLLM, SGLang, llama.cpp, TGI, Anthropic spellings).
type Finish uint8

// The finish kinds.
const (
	FinishNone Finish = iota
	FinishStop
	FinishToolCalls
	FinishLength
	FinishContentFilter
	FinishError
	FinishAbort
	FinishOther
)

// ParseFinish maps a protocol's finish_reason / stop_reason value to a Finish.
// An empty value (JSON null) is FinishNone; an unknown one is FinishOther.
func ParseFinish(v []byte) Finish {
	switch string(v) { // the compiler does not allocate for this conversion
	case "":
		return FinishNone
	case "stop", "eos_token", "stop_sequence", "end_turn", "eos", "word", "repetition":
		return FinishStop
	case "tool_calls", "function_call", "tool_use":
		return FinishToolCalls
	case "length", "max_tokens", "limit", "model_length":
		return FinishLength
	case "content_filter", "refusal":
		return FinishContentFilter
	case "error":
		return FinishError
	case "abort", "cancelled":
		return FinishAbort
	}
	return FinishOther
}

// ReadEnd is how reading the upstream body ended.
type ReadEnd uint8

// The read endings. ReadClean is io.EOF at a message boundary.
const (
	ReadClean        ReadEnd = iota
	ReadReset                // connection reset by the upstream
	ReadTruncated            // EOF inside a chunked or fixed-length body, or inside an event
	ReadFailed               // any other read error
	ReadTooLarge             // an event over our limit
	ReadBodyTooLarge         // a non-streamed body over our limit
	ReadMalformed            // bytes that are not the protocol (data that is not JSON)
	ReadBadUTF8              // data that is not valid UTF-8
)

// Facts are what the proxy observed about one request. The zero value is a
// request that went nowhere.
type Facts struct {
	// Rejected is set when our gateway refused the request (it never went
	// upstream); RejectedDetail says why.
	Rejected       Reason
	RejectedDetail Detail
	// ClientGone: the client disconnected before the response was complete.
	ClientGone bool
	// ClientStalled: with ClientGone, the client did not leave but stopped
	// reading, and the proxy gave up on it (the write stall limit).
	ClientStalled bool
	// Deadline names the deadline that fired, if any.
	Deadline Detail
	// ConnectFailed: no connection to any upstream could be made.
	ConnectFailed bool
	// ClosedBeforeResponse: the upstream closed the connection before any
	// response byte.
	ClosedBeforeResponse bool
	// HeadersTooLarge: the upstream's response headers were over our limit.
	HeadersTooLarge bool
	// MalformedHeaders: the upstream's status line or headers arrived but
	// could not be parsed.
	MalformedHeaders bool
	// Status is the upstream HTTP status (0 when none arrived).
	Status int
	// BadContentType: a streaming request got a 2xx that is not a stream.
	BadContentType bool
	// Stream: the response was an event stream, so its end marker matters.
	Stream bool
	// ErrorEvent: the stream carried an error object.
	ErrorEvent bool
	// Finish is the last finish reason seen.
	Finish Finish
	// Done: the stream's end marker ([DONE], message_stop, done:true) was seen.
	Done bool
	// Read is how the body read ended.
	Read ReadEnd
}

// Classify decides the one reason a request ended, and its detail. Causes
// the proxy imposed (rejection, the client leaving, a deadline) win over the
// upstream symptoms they provoke, since aborting the upstream makes its read
// fail.
func Classify(f Facts) (Reason, Detail) {
	switch {
	case f.Rejected != 0:
		return f.Rejected, f.RejectedDetail
	case f.ClientGone && f.ClientStalled:
		return ClientCancel, DetailClientWriteStall
	case f.ClientGone:
		return ClientCancel, DetailClientClosed
	case f.Deadline != "":
		return Deadline, f.Deadline
	case f.ConnectFailed:
		return WorkerFailure, DetailConnectFailed
	case f.HeadersTooLarge:
		return WorkerFailure, DetailHeadersTooLarge
	case f.MalformedHeaders:
		return WorkerFailure, DetailMalformedHeaders
	case f.ClosedBeforeResponse:
		return UpstreamDisconnect, DetailClosedBeforeResp
	case f.Status >= 500:
		return WorkerFailure, DetailUpstream5xx
	case f.Status == 401 || f.Status == 403:
		return PolicyBlock, DetailUpstreamAuth
	case f.Status == 429:
		return PolicyBlock, DetailUpstreamLimited
	case f.Status >= 400:
		return InvalidRequest, DetailUpstreamRejected
	case f.BadContentType:
		return WorkerFailure, DetailBadContentType
	case f.ErrorEvent:
		return WorkerFailure, DetailErrorEvent
	case f.Finish == FinishError:
		return WorkerFailure, DetailEngineError
	case f.Finish == FinishAbort:
		return WorkerFailure, DetailEngineAbort
	case f.Read == ReadTooLarge:
		return WorkerFailure, DetailEventTooLarge
	case f.Read == ReadBodyTooLarge:
		return WorkerFailure, DetailUpstreamBodyTooLarge
	case f.Read == ReadMalformed:
		return WorkerFailure, DetailMalformedEvent
	case f.Read == ReadBadUTF8:
		return WorkerFailure, DetailInvalidUTF8
	case f.Read == ReadReset:
		return UpstreamDisconnect, DetailResetMidStream
	case f.Read == ReadTruncated:
		return UpstreamDisconnect, DetailTruncatedBody
	case f.Read == ReadFailed:
		return UpstreamDisconnect, DetailReadFailed
	}
	return finished(f)
}

// finished classifies a body that was read to its clean end.
func finished(f Facts) (Reason, Detail) {
	var r Reason
	var d Detail
	switch f.Finish {
	case FinishStop, FinishOther:
		r, d = Stop, DetailStop
	case FinishToolCalls:
		r, d = Stop, DetailToolCalls
	case FinishLength:
		r, d = Length, DetailLength
	case FinishContentFilter:
		return PolicyBlock, DetailContentFilter
	default: // FinishNone
		switch {
		case !f.Stream:
			return Stop, DetailComplete
		case !f.Done:
			return UpstreamDisconnect, DetailEOFWithoutDone
		}
		return Stop, DetailDoneOnly
	}
	if f.Stream && !f.Done {
		d = DetailNoDoneMarker
	}
	return r, d
}

// PhaseOf says where a request stood when the client left, from what the
// proxy saw: not yet admitted, decoding, or in between, where engine is the
// phase the engine last announced (PhaseNone: it said nothing).
func PhaseOf(admitted, firstToken bool, engine Phase) Phase {
	switch {
	case firstToken:
		return PhaseDecoding
	case !admitted:
		return PhaseQueued
	case engine != PhaseNone:
		return engine
	}
	return PhaseUpstream
}
