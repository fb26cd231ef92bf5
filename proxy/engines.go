package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ttftlens/ttftlens/proxy/signals"
)

// EngineAuto asks the proxy to identify each upstream's engine from what it
// serves (its headers and /v1/models), once, when it is first used.
const EngineAuto = "auto"

// engineKind is an upstream's engine kind, set once known.
type engineKind struct {
	v atomic.Pointer[string]
}

func (k *engineKind) get() string {
	if p := k.v.Load(); p != nil {
		return *p
	}
	return signals.KindGeneric // until detected: the OpenAI fields, no engine timing
}

func (k *engineKind) set(kind string) { k.v.Store(&kind) }

// detectEngine asks the upstream what it is (GET /v1/models, bounded) and
// records the kind; "generic" when it cannot tell. It runs once per
// upstream, in the background, so no request waits for it.
func (p *Proxy) detectEngine(u *Upstream, baseURL string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	kind := signals.KindGeneric
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/v1/models", nil)
	if err == nil {
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		if resp, err := client.Do(req); err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			h := func(name string) []byte { return []byte(resp.Header.Get(name)) }
			kind = signals.Detect(h, body, []byte(resp.Header.Get("Server")))
		}
	}
	u.kind.set(kind)
	p.log.Info().Str("upstream", u.Name).Str("engine", kind).Msg("engine identified")
}

var (
	pathMessages = []byte("/v1/messages")
	pathOllama   = []byte("/api/")
)

// readerKind is the reader for a request: a path only one protocol uses
// decides (Anthropic Messages; Ollama's /api/chat and /api/generate),
// otherwise the upstream's engine (SGLang's and TGI's native /generate
// share a path, so the engine tells them apart).
func readerKind(path []byte, u *Upstream) string {
	switch {
	case bytes.Equal(path, pathMessages):
		return signals.KindAnthropic
	case bytes.HasPrefix(path, pathOllama):
		return signals.KindOllama
	}
	return u.kind.get()
}

// reader returns the exchange's reader of kind, reset for this request.
// Readers are kept per kind for the exchange's life (they are pooled with
// it).
func (x *exchange) reader(kind string) signals.Reader {
	for _, r := range x.readers {
		if r.Kind() == kind {
			r.Reset()
			return r
		}
	}
	r, err := signals.NewReader(kind)
	if err != nil {
		r, _ = signals.NewReader(signals.KindGeneric)
	}
	x.readers = append(x.readers, r)
	return r
}

// isNDJSON reports a newline-delimited JSON stream (Ollama's native API).
func isNDJSON(ct []byte) bool {
	mt, _, _ := bytes.Cut(ct, []byte(";"))
	mt = bytes.TrimSpace(mt)
	return bytes.EqualFold(mt, []byte("application/x-ndjson")) || bytes.EqualFold(mt, []byte("application/jsonl"))
}
