package refengine

import (
	"sync"
	"time"
)

// Truth is the engine's own account of one request, measured on the
// engine's monotonic clock. It is the reference a proxy's attribution is
// judged against. Durations are zero when the request did not get that far.
type Truth struct {
	RequestID   string
	Traceparent string // as received, for joining with traces
	Endpoint    string // "chat" or "completions"
	Stream      bool
	Faults      string // effective faults, header syntax
	Status      int    // HTTP status sent (0: the connection was reset before headers)
	// Received is when the request's first bytes were read (under Serve;
	// otherwise when its handler was entered).
	Received time.Time

	// The Server-Timing values (see PROTOCOL.md).
	Queue       time.Duration // arrival at the scheduler → first scheduled
	Tokenize    time.Duration // tokenizer stage, including the wait for a worker
	Media       time.Duration // image_url fetches (and the slow_media fault)
	Prefill     time.Duration // first scheduled → last prompt token computed
	Sync        time.Duration // rank barrier waits during the prefill steps (inside Prefill)
	FirstDecode time.Duration // last prompt token computed → first token sampled
	Recv        time.Duration // Received → media stage, and tokenizer stage → scheduler: reading, decoding, checking
	Unread      time.Duration // the kernel received the request's first bytes → Received (Linux; before Received)
	Emit        time.Duration // first token sampled → the timing comment rendered (streams)

	// Measured by the handler.
	FirstTokenSampled time.Duration // Received → first generated token sampled
	TTFT              time.Duration // Received → first content event written and flushed
	E2E               time.Duration // Received → handler done

	PromptTokens     int
	CachedTokens     int
	CompletionTokens int
	Preemptions      int

	// FinishReason is stop, length, content_filter, abort or error.
	FinishReason string
	// Detail is a machine-readable note on how the response ended when it
	// was not a plain finish: client_cancel, http_error, error_event,
	// reset_mid_stream, close_without_done, invalid_request, engine_closed.
	Detail string
	// ClientGone reports that the client left before the response ended;
	// TokensAfterClientLeft counts tokens generated after that.
	ClientGone            bool
	TokensAfterClientLeft int
}

// truthStore keeps the last capacity Truth records by request id. A request
// id seen again replaces the older record.
type truthStore struct {
	mu   sync.Mutex
	byID map[string]Truth
	ring []string
	next int
}

func newTruthStore(capacity int) *truthStore {
	return &truthStore{byID: make(map[string]Truth, capacity), ring: make([]string, capacity)}
}

func (s *truthStore) put(t Truth) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byID[t.RequestID]; !ok {
		if old := s.ring[s.next]; old != "" {
			delete(s.byID, old)
		}
		s.ring[s.next] = t.RequestID
		s.next = (s.next + 1) % len(s.ring)
	}
	s.byID[t.RequestID] = t
}

func (s *truthStore) get(id string) (Truth, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.byID[id]
	return t, ok
}
