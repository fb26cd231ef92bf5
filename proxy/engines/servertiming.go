package engines

import (
	"bytes"
	"math"
	"strconv"
	"time"

	"github.com/ttftlens/ttftlens/stages"
)

// ServerTimingPrefix starts the in-band SSE comment of the reference
// engine's protocol (refengine/PROTOCOL.md): ": server-timing <header value>".
var ServerTimingPrefix = []byte("server-timing ")

// serverTimingNames maps the protocol's metric names to engine durations.
var serverTimingNames = [...]struct {
	name string
	dur  stages.EngineDur
}{
	{"queue", stages.EngineQueue},
	{"tokenize", stages.EngineTokenize},
	{"media", stages.EngineMedia},
	{"prefill", stages.EnginePrefill},
	{"sync", stages.EngineSync},
	{"decode1", stages.EngineFirstDecode},
	{"recv", stages.EngineRecv},
	{"unread", stages.EngineUnread},
	{"emit", stages.EngineEmit},
}

// ParseServerTiming reads a W3C Server-Timing value
// (`name;dur=12.5;desc="x", other;dur=3`) and records the protocol's metrics
// on tl. Unknown metrics, metrics without dur and malformed entries are
// skipped. It reports how many durations it recorded.
func ParseServerTiming(v []byte, tl *stages.Timeline) int {
	n := 0
	for len(v) > 0 {
		var entry []byte
		entry, v = cutUnquoted(v, ',')
		name, params := cutUnquoted(entry, ';')
		name = bytes.TrimSpace(name)
		dur, ok := durParam(params)
		if !ok {
			continue
		}
		for _, m := range serverTimingNames {
			if string(name) == m.name {
				tl.SetEngine(m.dur, time.Duration(math.Round(dur*float64(time.Millisecond))))
				n++
				break
			}
		}
	}
	return n
}

// cutUnquoted splits v at the first sep outside a quoted string (a desc may
// contain ',' and ';'). An unterminated quote runs to the end of v.
func cutUnquoted(v []byte, sep byte) (head, rest []byte) {
	quoted := false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\' && quoted && i+1 < len(v):
			i++
		case c == '"':
			quoted = !quoted
		case c == sep && !quoted:
			return v[:i], v[i+1:]
		}
	}
	return v, nil
}

const maxDurMs = 24 * 3600 * 1000

// durParam finds dur=<milliseconds> among ;-separated parameters.
func durParam(params []byte) (float64, bool) {
	for len(params) > 0 {
		var p []byte
		p, params = cutUnquoted(params, ';')
		k, val, ok := bytes.Cut(p, []byte("="))
		if !ok || !bytes.EqualFold(bytes.TrimSpace(k), []byte("dur")) {
			continue
		}
		f, err := strconv.ParseFloat(string(bytes.TrimSpace(val)), 64)
		// NaN and values past a day are not durations an engine measured.
		if err != nil || f != f || f > maxDurMs || f < -maxDurMs {
			return 0, false
		}
		return f, true
	}
	return 0, false
}
