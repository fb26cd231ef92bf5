package endreason

// ConnDiscard is why the proxy closed a pooled upstream connection instead
// of using it again: something arrived on it that no request asked for,
// or its end. Discards are counted, not recorded
// (ttftlens_upstream_conns_discarded_total); the values are metric labels.
// No request ever reads what arrived.
type ConnDiscard string

// Why a pooled upstream connection was closed.
const (
	DiscardBytesPastEnd    ConnDiscard = "bytes_past_end"    // bytes behind the response's end (its Content-Length, or its final chunk and trailers), read with it
	DiscardIdleReadable    ConnDiscard = "idle_readable"     // bytes in the socket once it was idle in the pool: arrived then, or behind the response unread
	DiscardIdleClosed      ConnDiscard = "idle_closed"       // the upstream ended it (FIN, RST) after its response: as the response ended, or idle in the pool
	DiscardReadableAtReuse ConnDiscard = "readable_at_reuse" // bytes found waiting when it was taken for a request, before the request was written
	DiscardClosedAtReuse   ConnDiscard = "closed_at_reuse"   // its end found when it was taken for a request, before the request was written
)

// ConnDiscards returns every ConnDiscard, for metrics created up front.
func ConnDiscards() []ConnDiscard {
	return []ConnDiscard{DiscardBytesPastEnd, DiscardIdleReadable, DiscardIdleClosed, DiscardReadableAtReuse, DiscardClosedAtReuse}
}
