package proxy

import (
	"strings"
	"testing"
	"unicode"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/gateway"
)

const refusalYAML = `
auth: keys
max_body_bytes: 1024
keys:
  - name: alice
    key: ALICE_HASH
  - name: bob
    key: BOB_HASH
    quota: {interval: 1h, requests: 1}
routes:
  - model: m
    pool: a
    max_tokens: 16
  - model: held
    pool: h
  - model: gone
    pool: d
pools:
  - name: a
    upstreams: [UP_A]
  - name: h
    upstreams: [UP_H]
    max_in_flight: 1
    queue_size: 1
    queue_max_wait: 1ms
  - name: d
    upstreams: [DEAD]
`

// TestRefusalRecords: the record of every refusal, the gateway's and the
// upstream's, names the model the body names, whichever check refused it,
// and its error has no white space around it (an upstream's error body
// ends with a newline, which the record's error must not).
func TestRefusalRecords(t *testing.T) {
	release := make(chan struct{})
	// The upstream's answer, by the request's X-Answer header.
	answers := map[string]func(c *upConn){
		"":         func(c *upConn) { c.stream(2, 0) },
		"hold":     func(c *upConn) { <-release; c.stream(2, 0) },
		"400 json": func(c *upConn) { c.whole(400, "application/json", "{\"error\":{\"message\":\"bad\"}}\n") },
		"401 json": func(c *upConn) { c.whole(401, "application/json", "{\"error\":{\"message\":\"no key\"}}\n") },
		"404 text": func(c *upConn) { c.whole(404, "text/plain", "404 page not found\n") },
		"429 json": func(c *upConn) { c.whole(429, "application/json", "\n{\"error\":{\"message\":\"slow down\"}}\r\n") },
		"503 html": func(c *upConn) { c.whole(503, "text/html", "<h1>down</h1>\r\n\r\n") },
		"500 long": func(c *upConn) { c.whole(500, "text/plain", strings.Repeat("x", 511)+" \n"+strings.Repeat("y", 100)) },
		"200 text": func(c *upConn) { c.whole(200, "text/plain", "hello\n") },
	}
	script := func(c *upConn) { answers[c.req.Header.Get("X-Answer")](c) }
	upA, upH := startUpstream(t, script), startUpstream(t, script)
	t.Cleanup(func() { close(release) }) // before the upstreams close (cleanups run last first)
	yaml := strings.NewReplacer("ALICE_HASH", gateway.HashKey("alice-key"), "BOB_HASH", gateway.HashKey("bob-key")).Replace(refusalYAML)
	addr, sink, _ := startGateway(t, yaml, map[string]string{"UP_A": upA.url, "UP_H": upH.url, "DEAD": deadURL(t)})

	tests := []struct {
		name   string
		key    string
		body   string
		hdr    []string // more request headers
		status int
		detail endreason.Detail
		model  string // the record's
		hold   bool   // the held pool's one slot is taken first
	}{
		// Refused before the body is read: no model.
		{"no key", "", chat("m", ""), nil, 401, endreason.DetailMissingKey, "", false},
		{"wrong key", "nope", chat("m", ""), nil, 401, endreason.DetailInvalidKey, "", false},
		{"body over the limit", "alice-key", chat("m", `,"pad":"`+strings.Repeat("x", 1024)+`"`), nil, 413, endreason.DetailRequestBodyTooLarge, "", false},
		// Refused by a check of the body.
		{"malformed JSON", "alice-key", `{"model":"m",`, nil, 400, endreason.DetailMalformedRequest, "", false},
		{"model not a string", "alice-key", `{"model":7,"messages":[{"role":"user","content":"hi"}]}`, nil, 400, endreason.DetailInvalidParam, "", false},
		{"unknown model", "alice-key", chat("gpt-9", ""), nil, 400, endreason.DetailUnknownModel, "gpt-9", false},
		{"stream not a boolean", "alice-key", `{"model":"m","stream":"yes","messages":[{"role":"user","content":"hi"}]}`, nil, 400, endreason.DetailInvalidParam, "m", false},
		{"no messages", "alice-key", `{"model":"m"}`, nil, 400, endreason.DetailInvalidParam, "m", false},
		{"max_tokens over the route's cap", "alice-key", chat("m", `,"max_tokens":17`), nil, 400, endreason.DetailInvalidParam, "m", false},
		{"temperature out of range", "alice-key", chat("m", `,"temperature":3`), nil, 400, endreason.DetailInvalidParam, "m", false},
		{"include_usage not a boolean", "alice-key", chat("m", `,"stream_options":{"include_usage":1}`), nil, 400, endreason.DetailInvalidParam, "m", false},
		// Refused after the body passed.
		{"deadline header", "alice-key", chat("m", ""), []string{gateway.HeaderDeadline, "soon"}, 400, endreason.DetailInvalidParam, "m", false},
		{"quota: first", "bob-key", chat("m", ""), nil, 200, endreason.DetailStop, "m", false},
		{"quota: second is over", "bob-key", chat("m", ""), nil, 429, endreason.DetailQuotaExceeded, "m", false},
		{"queue timeout", "alice-key", chat("held", ""), nil, 503, endreason.DetailQueueTimeout, "held", true},
		{"upstream unreachable", "alice-key", chat("gone", ""), nil, 502, endreason.DetailConnectFailed, "gone", false},
		// Refused by the upstream.
		{"upstream 400", "alice-key", chat("m", ""), []string{"X-Answer", "400 json"}, 400, endreason.DetailUpstreamRejected, "m", false},
		{"upstream 401", "alice-key", chat("m", ""), []string{"X-Answer", "401 json"}, 401, endreason.DetailUpstreamAuth, "m", false},
		{"upstream 404 text", "alice-key", chat("m", ""), []string{"X-Answer", "404 text"}, 404, endreason.DetailUpstreamRejected, "m", false},
		{"upstream 429", "alice-key", chat("m", ""), []string{"X-Answer", "429 json"}, 429, endreason.DetailUpstreamLimited, "m", false},
		{"upstream 503 html", "alice-key", chat("m", ""), []string{"X-Answer", "503 html"}, 503, endreason.DetailUpstream5xx, "m", false},
		{"upstream 500, white space at the cut", "alice-key", chat("m", ""), []string{"X-Answer", "500 long"}, 500, endreason.DetailUpstream5xx, "m", false},
		{"upstream text to a stream", "alice-key", chat("m", ""), []string{"X-Answer", "200 text"}, 502, endreason.DetailBadContentType, "m", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := tt.hdr
			if tt.key != "" {
				hdr = append([]string{"Authorization", "Bearer " + tt.key}, hdr...)
			}
			heldDone := make(chan struct{})
			if tt.hold {
				go func() {
					defer close(heldDone)
					post(t, addr, chat("held", ""), "Authorization", "Bearer alice-key", "X-Answer", "hold")
				}()
				upH.request(t) // the slot is taken
			}
			resp, body, err := post(t, addr, tt.body, hdr...)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d (%s)", resp.StatusCode, tt.status, body)
			}
			r := sink.next(t)
			if r.Detail != tt.detail {
				t.Errorf("record %s/%s, want detail %s", r.Reason, r.Detail, tt.detail)
			}
			if r.Model != tt.model {
				t.Errorf("record model %q, want %q", r.Model, tt.model)
			}
			if tt.status >= 400 && r.Error == "" {
				t.Error("record has no error")
			}
			if e := r.Error; strings.TrimFunc(e, unicode.IsSpace) != e {
				t.Errorf("record error %q has white space around it", e)
			}
			if tt.hold {
				release <- struct{}{}
				<-heldDone
				sink.next(t) // the held request's
			}
		})
	}
}
