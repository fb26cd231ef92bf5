// Package bench is the probe behind "ttftlens bench": a load generator
// that measures what clients see — time to first token, inter-token gaps
// and time to completion, per event, on one monotonic clock — and joins
// every request with the proxy's own record (by X-Request-Id, from the
// admin listener's /debug/requests/{id}) to split the client-seen TTFT
// into the proxy's stages plus "outside": the part that happened before
// the proxy received the request or after it flushed the first token (the
// client's network and transport, and any proxy between the client and
// ttftlens).
//
// It also reads the proxy's JSON log lines (Report) for the same breakdown
// offline. The package imports only the standard library and the stdlib-only
// stages and record packages (record for the names of the record's JSON
// fields), so it can probe any OpenAI-compatible endpoint; bench/lab
// runs the reference engine and the proxy in-process for the demos and the
// proof suite.
package bench
