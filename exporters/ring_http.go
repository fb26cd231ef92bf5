package exporters

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/endreason"
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
		Recent:     make([]rowJSON, len(recent)),
		Slowest:    make([]rowJSON, len(slowest)),
		Aggregates: aggregatesJSON(&st),
	}
	for i := range recent {
		out.Recent[i] = row(&recent[i])
	}
	for i := range slowest {
		out.Slowest[i] = row(&slowest[i])
	}
	writeJSON(ctx, fasthttp.StatusOK, &out)
}

func (g *Ring) serveOne(ctx *fasthttp.RequestCtx) {
	id := strings.TrimPrefix(string(ctx.Path()), RequestsPath+"/")
	s, ok := g.Lookup(id)
	if !ok || id == "" {
		writeJSONError(ctx, fasthttp.StatusNotFound, "no record kept for request id "+strconv.Quote(id), "unknown_request_id")
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, full(&s))
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
	Total      uint64    `json:"total"`
	Recent     []rowJSON `json:"recent"`
	Slowest    []rowJSON `json:"slowest"`
	Aggregates aggJSON   `json:"aggregates"`
}

// rowJSON is a record in a list: enough for a table row and a small
// stacked bar. Field names follow the JSON log line.
type rowJSON struct {
	RequestID string    `json:"request_id"`
	Time      time.Time `json:"time"`
	Method    string    `json:"method"`
	Path      string    `json:"path"`
	Model     string    `json:"model"`
	Upstream  string    `json:"upstream"`
	Stream    bool      `json:"stream"`
	Status    int       `json:"status"`
	EndReason string    `json:"end_reason"`
	EndDetail string    `json:"end_detail"`
	Phase     string    `json:"phase,omitempty"`
	TTFT      *float64  `json:"ttft_ms,omitempty"`
	E2E       float64   `json:"e2e_ms"`
	TokensOut int       `json:"tokens_out"`
	Stages    msObject  `json:"stages_ms,omitempty"`
}

// requestJSON is one record in full.
type requestJSON struct {
	rowJSON
	TraceID           string    `json:"trace_id"`
	SpanID            string    `json:"span_id"`
	ParentSpanID      string    `json:"parent_span_id,omitempty"`
	Key               string    `json:"key,omitempty"`
	Error             string    `json:"error,omitempty"`
	Marks             msObject  `json:"marks_ms"`
	Engine            msObject  `json:"engine_ms,omitempty"`
	EngineReport      string    `json:"engine_report,omitempty"`
	EngineInferred    bool      `json:"engine_report_inferred,omitempty"`
	EngineWaiting     *int64    `json:"engine_waiting,omitempty"`
	EngineRunning     *int64    `json:"engine_running,omitempty"`
	Unsplit           bool      `json:"upstream_unsplit,omitempty"`
	Inconsistent      bool      `json:"engine_report_inconsistent,omitempty"`
	TokensIn          int       `json:"tokens_in,omitempty"`
	ITL               msObject  `json:"itl_ms,omitempty"`
	Stalls            int       `json:"stalls,omitempty"`
	Events            int       `json:"events"`
	BytesIn           int64     `json:"bytes_in"`
	BytesOut          int64     `json:"bytes_out"`
	MaxResidency      float64   `json:"residency_max_ms,omitempty"`
	Blocked           float64   `json:"transport_blocked_ms,omitempty"`
	Buffering         []string  `json:"buffering,omitempty"`
	CancelToClose     *float64  `json:"cancel_to_close_ms,omitempty"`
	TokensAfterCancel *int      `json:"tokens_after_cancel,omitempty"`
	Waterfall         []segJSON `json:"waterfall"`
}

// segJSON is a waterfall bar. start_ms and end_ms are the segment's
// offsets rounded to the microsecond, dur_ms their difference, so
// contiguous bars stay contiguous and the TTFT stages add up to ttft_ms.
type segJSON struct {
	Name  string  `json:"name"`
	Kind  string  `json:"kind"`
	Start float64 `json:"start_ms"`
	End   float64 `json:"end_ms"`
	Dur   float64 `json:"dur_ms"`
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

func row(s *Summary) rowJSON {
	r := rowJSON{
		RequestID: s.RequestID, Time: s.Timeline.Wall(),
		Method: s.Method, Path: s.Path, Model: s.Model, Upstream: s.Upstream,
		Stream: s.Streaming, Status: s.Status,
		EndReason: s.Reason.String(), EndDetail: string(s.Detail),
		E2E: millis(s.E2E), TokensOut: s.TokensOut,
	}
	if s.Reason == endreason.ClientCancel {
		r.Phase = s.Phase.String()
	}
	if s.Breakdown.OK {
		ttft := millis(s.Breakdown.TTFT)
		r.TTFT = &ttft
		r.Stages = make(msObject, stages.NumStages)
		var cum time.Duration
		var prev int64
		for i, d := range s.Breakdown.Stages {
			// Round the boundaries, not each stage, so the stages add up
			// to ttft_ms exactly.
			cum += d
			us := roundMicros(cum)
			r.Stages[i] = msField{stages.Stage(i).String(), float64(us-prev) / 1000}
			prev = us
		}
	}
	return r
}

func full(s *Summary) *requestJSON {
	r := &requestJSON{
		rowJSON: row(s),
		TraceID: s.TraceID.String(), SpanID: s.SpanID.String(),
		Key: s.Key, Error: s.Error,
		EngineReport: s.EngineSource, EngineInferred: s.EngineInferred,
		MaxResidency: millis(s.MaxResidency), Blocked: millis(s.Blocked),
		Buffering:    s.Buffering.Kinds(),
		Unsplit:      s.Breakdown.OK && s.Breakdown.Unsplit,
		Inconsistent: s.Breakdown.Inconsistent,
		TokensIn:     s.TokensIn,
		Stalls:       s.Stalls, Events: s.Events, BytesIn: s.BytesIn, BytesOut: s.BytesOut,
	}
	if !s.ParentID.IsZero() {
		r.ParentSpanID = s.ParentID.String()
	}
	if s.EngineLoad {
		waiting, running := s.EngineWaiting, s.EngineRunning
		r.EngineWaiting, r.EngineRunning = &waiting, &running
	}
	for m := range stages.NumMarks {
		if at, ok := s.Timeline.At(m); ok {
			r.Marks = append(r.Marks, msField{m.String(), millis(at)})
		}
	}
	for d := range stages.NumEngineDurs {
		if v, ok := s.Timeline.Engine(d); ok {
			r.Engine = append(r.Engine, msField{d.String(), millis(v)})
		}
	}
	if s.Gaps.N > 0 {
		r.ITL = msObject{{"p50", millis(s.Gaps.P50)}, {"p99", millis(s.Gaps.P99)}, {"max", millis(s.Gaps.Max)}}
	}
	if s.Reason == endreason.ClientCancel {
		c, n := millis(s.CancelToClose), s.TokensAfterCancel
		r.CancelToClose, r.TokensAfterCancel = &c, &n
	}
	var buf [12]Segment
	segs := s.Segments(buf[:0])
	r.Waterfall = make([]segJSON, len(segs))
	for i, g := range segs {
		a, b := roundMicros(g.Start), roundMicros(g.End)
		r.Waterfall[i] = segJSON{Name: g.Name, Kind: g.Kind.String(),
			Start: float64(a) / 1000, End: float64(b) / 1000, Dur: float64(b-a) / 1000}
	}
	return r
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
