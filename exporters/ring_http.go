package exporters

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// The debug endpoints' paths. RequestsPrefix ends in "/*" so that
// AdminHandler treats it as a prefix route.
const (
	RequestsPath   = "/debug/requests"
	RequestsPrefix = "/debug/requests/*"
)

// DefaultRequestsLimit is how many records each list of GET /debug/requests
// holds when the query has no limit.
const DefaultRequestsLimit = 50

// Routes returns the ring's admin routes, for AdminHandler's extra map:
//
//   - GET /debug/requests[?limit=N]: {"total", "recent", "slowest",
//     "aggregates"}. recent (newest first) and slowest (slowest first) hold
//     up to N (default 50, at most the ring's size) compact rows; the
//     aggregates cover the whole recent window.
//   - GET /debug/requests/{id}: the newest kept record with that request id
//     in full, with its waterfall; 404 {"error":{...}} when none is kept.
//     The id is the rest of the path (it may contain '/').
//
// Responses are JSON, never cached.
func (g *Ring) Routes() map[string]fasthttp.RequestHandler {
	return map[string]fasthttp.RequestHandler{
		RequestsPath:   getOnly(g.serveList),
		RequestsPrefix: getOnly(g.serveOne),
	}
}

func (g *Ring) serveList(ctx *fasthttp.RequestCtx) {
	limit := DefaultRequestsLimit
	if v := ctx.QueryArgs().Peek("limit"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n <= 0 {
			writeJSONError(ctx, fasthttp.StatusBadRequest, "limit must be a positive integer", "invalid_limit")
			return
		}
		limit = n
	}
	recent := g.Recent(nil, limit)
	slowest := g.Slowest(nil, limit)
	st := g.Stats()
	out := listJSON{
		Total:      st.Total,
		Recent:     rowsJSON(recent),
		Slowest:    rowsJSON(slowest),
		Aggregates: aggregatesJSON(&st),
	}
	writeJSON(ctx, fasthttp.StatusOK, &out)
}

func (g *Ring) serveOne(ctx *fasthttp.RequestCtx) {
	id := strings.TrimPrefix(string(ctx.Path()), RequestsPath+"/")
	r, ok := g.Lookup(id)
	if !ok || id == "" {
		writeJSONError(ctx, fasthttp.StatusNotFound, "no record kept for request id "+strconv.Quote(id), "unknown_request_id")
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, requestJSON(&r))
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // only our own types are encoded; this is a bug
		ctx.Error(err.Error(), fasthttp.StatusInternalServerError)
		return
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetBody(append(b, '\n'))
}

func writeJSONError(ctx *fasthttp.RequestCtx, status int, msg, code string) {
	var e struct {
		Error struct {
			Message string `json:"message"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	e.Error.Message, e.Error.Code = msg, code
	writeJSON(ctx, status, &e)
}

type listJSON struct {
	Total      uint64            `json:"total"`
	Recent     []json.RawMessage `json:"recent"`
	Slowest    []json.RawMessage `json:"slowest"`
	Aggregates aggJSON           `json:"aggregates"`
}

type aggJSON struct {
	Window     int                 `json:"window"`
	FirstToken int                 `json:"with_first_token"`
	Stages     map[string]msObject `json:"stages_ms"` // "p50", "p95"
	TTFT       msObject            `json:"ttft_ms"`
	E2E        msObject            `json:"e2e_ms"`
	Reasons    map[string]uint64   `json:"end_reasons"`
	Total      map[string]uint64   `json:"end_reasons_total"`
}

func aggregatesJSON(st *RingStats) aggJSON {
	a := aggJSON{
		Window: st.Window, FirstToken: st.FirstToken,
		Stages:  map[string]msObject{"p50": nil, "p95": nil},
		TTFT:    msObject{{"p50", millis(st.TTFT.P50)}, {"p95", millis(st.TTFT.P95)}},
		E2E:     msObject{{"p50", millis(st.E2E.P50)}, {"p95", millis(st.E2E.P95)}},
		Reasons: map[string]uint64{},
		Total:   map[string]uint64{},
	}
	p50, p95 := make(msObject, stages.NumStages), make(msObject, stages.NumStages)
	for i := range stages.NumStages {
		name := stages.Stage(i).String()
		p50[i] = msField{name, millis(st.Stages[i].P50)}
		p95[i] = msField{name, millis(st.Stages[i].P95)}
	}
	a.Stages["p50"], a.Stages["p95"] = p50, p95
	for _, r := range endreason.All() {
		a.Reasons[r.String()] = st.Reasons[reasonIndex(r)]
		a.Total[r.String()] = st.ReasonsTotal[reasonIndex(r)]
	}
	if n := st.Reasons[0]; n > 0 {
		a.Reasons["unknown"] = n
	}
	if n := st.ReasonsTotal[0]; n > 0 {
		a.Total["unknown"] = n
	}
	return a
}

// rowsJSON returns the list rows of recs: enough of each record for a
// table row and a small stacked bar.
func rowsJSON(recs []record.Record) []json.RawMessage {
	out := make([]json.RawMessage, len(recs))
	for i := range recs {
		out[i] = recordJSON(&recs[i], inRow, nil)
	}
	return out
}

// requestJSON returns r in full: the log line's fields but its framing,
// marks_ms and the waterfall.
func requestJSON(r *record.Record) json.RawMessage {
	return recordJSON(r, inPage, func(e *zerolog.Event, b []byte) {
		e.RawJSON("marks_ms", appendMarks(b[:0], &r.Timeline))
		e.RawJSON("waterfall", appendWaterfall(b[:0], r))
	})
}

// recordJSON returns the fields of r that form in carries as one JSON
// object, then what more adds (b is scratch space for it). The log line's
// writer writes it, so the pages and the log cannot disagree.
func recordJSON(r *record.Record, in form, more func(e *zerolog.Event, b []byte)) json.RawMessage {
	var buf bytes.Buffer
	l := zerolog.New(&buf)
	e := l.Log()
	var sc scratch
	writeFields(e, &fieldSource{r: r, breakdown: r.Breakdown(), gaps: r.Stream.Gaps()}, in, &sc)
	if more != nil {
		more(e, sc.b)
	}
	e.Send()
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})
}

// appendMarks appends the marks set on t, in mark order.
func appendMarks(b []byte, t *stages.Timeline) []byte {
	b = append(b, '{')
	for m := range stages.NumMarks {
		if at, ok := t.At(m); ok {
			b = stages.AppendMillis(appendMember(b, markKeys[m]), stages.Micros(at))
		}
	}
	return append(b, '}')
}

// appendWaterfall appends r's waterfall bars (Segments), kind "stage",
// "decode", "finish", "open" or "predicted" (SegmentKind); an inferred one
// says "inferred": true. start_ms
// and end_ms are the segment's offsets rounded to the microsecond, dur_ms
// their difference, so contiguous bars stay contiguous and the TTFT stages
// add up to ttft_ms.
func appendWaterfall(b []byte, r *record.Record) []byte {
	var buf [maxSegments]Segment
	b = append(b, '[')
	for i, g := range Segments(buf[:0], r) {
		if i > 0 {
			b = append(b, ',')
		}
		start, end := stages.Micros(g.Start), stages.Micros(g.End)
		b = append(b, `{"name":"`...)
		b = append(b, g.Name...)
		b = append(b, `","kind":"`...)
		b = append(b, g.Kind.String()...)
		if g.Inferred {
			b = append(b, `","inferred":true,"start_ms":`...)
		} else {
			b = append(b, `","start_ms":`...)
		}
		b = stages.AppendMillis(b, start)
		b = append(b, `,"end_ms":`...)
		b = stages.AppendMillis(b, end)
		b = append(b, `,"dur_ms":`...)
		b = stages.AppendMillis(b, end-start)
		b = append(b, '}')
	}
	return append(b, ']')
}

// msObject is a JSON object of milliseconds that keeps its keys in order
// (stage order, mark order), unlike a map.
type msObject []msField

type msField struct {
	k string // a fixed identifier: never needs escaping
	v float64
}

// MarshalJSON writes the fields in order; null for an empty object.
func (o msObject) MarshalJSON() ([]byte, error) {
	if o == nil {
		return []byte("null"), nil
	}
	b := make([]byte, 0, 16*len(o)+2)
	b = append(b, '{')
	for i, f := range o {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, f.k...)
		b = append(b, '"', ':')
		b = strconv.AppendFloat(b, f.v, 'f', -1, 64)
	}
	return append(b, '}'), nil
}
