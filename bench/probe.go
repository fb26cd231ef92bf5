package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config is one probe run. The zero value is not runnable: Run needs a
// URL, and a count (Requests) or a Duration.
type Config struct {
	// URL is the server's base URL (default http://127.0.0.1:8080).
	URL string
	// Admin is the proxy's admin listener (e.g. http://127.0.0.1:9464) to
	// join records from; empty means no join.
	Admin string
	// Model is sent as "model" (default "ttftlens-ref").
	Model string
	// Completions sends to /v1/completions with a "prompt"; otherwise
	// /v1/chat/completions with "messages".
	Completions bool
	// NoStream asks for a whole response instead of an event stream; its
	// client TTFT is then the time to the complete body.
	NoStream bool
	// Concurrency is the closed loop's number of clients, each sending its
	// next request when the previous one is over (default 1). Ignored when
	// Rate is set.
	Concurrency int
	// Rate, when positive, runs an open loop: requests start at Poisson
	// arrivals of Rate per second, each on schedule however long earlier
	// ones take (no coordinated omission), and every latency is measured
	// from the scheduled start.
	Rate float64
	// Requests is how many measured requests to send; Duration bounds the
	// time spent starting them instead (requests already started finish).
	// One of them must be set; with both, whichever ends first.
	Requests int
	Duration time.Duration
	// Warmup requests are sent first and left out of every figure.
	Warmup int
	// PromptTokens and OutputTokens are the lengths drawn per request.
	// A prompt of N tokens is N words of plain English (about one token
	// each); OutputTokens is sent as max_tokens (0: omitted). Ignored for
	// the prompt when Prompts is set.
	PromptTokens, OutputTokens Dist
	// Prompts are used in turn instead of generated prompts.
	Prompts []Prompt
	// IgnoreEOS sends "ignore_eos": true so that generations run to
	// max_tokens (vLLM, SGLang and the reference engine honour it).
	IgnoreEOS bool
	// Header is added to every request (after the probe's own headers, so
	// it can override them; X-Request-Id excepted).
	Header http.Header
	// APIKey is sent as "Authorization: Bearer APIKey" when not empty.
	APIKey string
	// Timeout bounds each request; a request over it is cancelled by the
	// client (0: none).
	Timeout time.Duration
	// Seed makes the lengths drawn reproducible (0: random).
	Seed uint64
	// Progress receives progress while the run goes on (nil: none). On a
	// terminal (ProgressTTY) it is a bar redrawn in place, otherwise a
	// plain line every few seconds.
	Progress    io.Writer
	ProgressTTY bool
	// Transport is the client's transport (nil: one made for the run,
	// keeping up to Concurrency connections alive, no compression). The
	// reachability check before the load dials URL's host itself, whatever
	// the transport.
	Transport http.RoundTripper
}

// Result is one request as the client saw it, and its joined record.
// Times are on the run's monotonic clock.
type Result struct {
	ID string
	// Seq is the request's number in the run: its prompt is
	// Prompts[Seq mod len(Prompts)].
	Seq    int
	Warmup bool
	// Start is when the request was due, from the run's start (for an
	// open loop its schedule; for a closed loop when it was sent). Lag is
	// how late it was actually sent.
	Start, Lag time.Duration
	Status     int
	// End is the client's view of how the request ended: "done" (a
	// complete response), "cut" (the stream ended without [DONE] or a
	// finish), "error_event", "http_NNN", "timeout", "error" (no
	// response).
	End string
	Err string
	// HasTTFT says a first content event arrived; TTFT is then from Start
	// to it (to the whole body for a non-streamed response).
	HasTTFT bool
	TTFT    time.Duration
	// E2E is from Start to the end of the body (or the failure).
	E2E    time.Duration
	Tokens int
	// Gaps are the times between consecutive content events.
	Gaps   []time.Duration
	Finish string // the last finish_reason seen

	// Record is the proxy's record, when joined; JoinErr says why not.
	Record  *Record
	JoinErr string

	unsent bool // the connection failed: the server never saw the request
}

// OK reports a complete response.
func (r *Result) OK() bool { return r.End == "done" }

// Outside is client TTFT − proxy TTFT, when both exist.
func (r *Result) Outside() (time.Duration, bool) {
	if !r.HasTTFT || r.Record == nil || !r.Record.HasTTFT {
		return 0, false
	}
	return r.TTFT - r.Record.TTFT, true
}

// Run is a finished run: every result, warm-up included (flagged), and
// what a report needs about the run itself.
type Run struct {
	Config  Config
	Results []Result
	// Elapsed is from the first measured request's start to the end of the
	// last one.
	Elapsed time.Duration
	// JoinNote says why records were not joined ("" when they were).
	JoinNote string
}

// Run sends the load and waits for every request and join to finish. It
// first opens one TCP connection to the server and closes it: when that
// fails, no load is sent and the error is an *UnreachableError. Otherwise
// it returns an error only for a configuration it cannot run; failed
// requests are results. Cancelling ctx stops starting requests and cancels
// those in flight.
func (c Config) Run(ctx context.Context) (*Run, error) {
	p, err := newProbe(c)
	if err != nil {
		return nil, err
	}
	if err := p.checkReachable(ctx); err != nil {
		return nil, err
	}
	return p.run(ctx), nil
}

// UnreachableError is a run that sent nothing: no connection to the server
// could be opened.
type UnreachableError struct {
	URL string // the server's base URL, as configured
	Err error  // the cause, e.g. syscall.ECONNREFUSED
}

func (e *UnreachableError) Error() string { return "cannot reach " + e.URL + ": " + e.Err.Error() }
func (e *UnreachableError) Unwrap() error { return e.Err }

// reachTimeout bounds the connection attempt before the load.
const reachTimeout = 10 * time.Second

// checkReachable opens one TCP connection to the server and closes it
// without sending a request.
func (p *probe) checkReachable(ctx context.Context) error {
	d := net.Dialer{Timeout: reachTimeout}
	conn, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &UnreachableError{URL: p.cfg.URL, Err: dialCause(err)}
	}
	return conn.Close()
}

// dialCause is the innermost reason a dial failed: "connection refused",
// not "dial tcp 127.0.0.1:9: connect: connection refused".
func dialCause(err error) error {
	var op *net.OpError
	if errors.As(err, &op) {
		err = op.Err
	}
	var sys *os.SyscallError
	if errors.As(err, &sys) {
		err = sys.Err
	}
	return err
}

// isDialError reports a request that failed before a connection to the
// server was made: the server never saw it.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

type probe struct {
	cfg      Config
	url      string
	addr     string // the server's host:port
	client   *http.Client
	ownTrans *http.Transport
	prefix   string
	base     time.Time
	rng      *mrand.Rand
	rngMu    sync.Mutex

	joiner   *Joiner
	joinQ    chan *Result
	joinWG   sync.WaitGroup
	joinNote string
	// joined says a record was found; joinMissed is the id of a request
	// the admin endpoint had no record of while none had been found: the
	// endpoint does not see this server's requests, and joining stops.
	joined     atomic.Bool
	joinMissed atomic.Pointer[string]

	total   int // warmup + measured, or -1 with a duration
	started atomic.Int64
	done    atomic.Int64
	errs    atomic.Int64 // measured requests without a complete response
	ok      atomic.Int64 // measured requests with one
	measure atomic.Int64 // run-clock ns of the first measured start (0: none yet)

	mu      sync.Mutex
	results []*Result
}

func newProbe(c Config) (*probe, error) {
	if c.URL == "" {
		c.URL = "http://127.0.0.1:8080"
	}
	if c.Model == "" {
		c.Model = "ttftlens-ref"
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 1
	}
	if c.Requests <= 0 && c.Duration <= 0 {
		return nil, errors.New("give a number of requests (-n) or a duration (-d)")
	}
	if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		return nil, errors.New("rate must be a positive number of requests per second")
	}
	path := "/v1/chat/completions"
	if c.Completions {
		path = "/v1/completions"
	}
	p := &probe{cfg: c, url: strings.TrimRight(c.URL, "/") + path}
	u, err := url.Parse(p.url)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("url %q: want http:// or https:// and a host", c.URL)
	}
	port := u.Port()
	switch {
	case port != "":
	case u.Scheme == "https":
		port = "443"
	default:
		port = "80"
	}
	p.addr = net.JoinHostPort(u.Hostname(), port)
	tr := c.Transport
	if tr == nil {
		conns := c.Concurrency
		if c.Rate > 0 {
			conns = max(64, int(c.Rate))
		}
		p.ownTrans = &http.Transport{
			Proxy:               nil, // measure the path given, not an environment proxy
			MaxIdleConns:        conns,
			MaxIdleConnsPerHost: conns,
			DisableCompression:  true,
			IdleConnTimeout:     30 * time.Second,
		}
		tr = p.ownTrans
	}
	p.client = &http.Client{Transport: tr}
	var b [6]byte
	_, _ = rand.Read(b[:])
	p.prefix = "bench-" + hex.EncodeToString(b[:])
	seed := c.Seed
	if seed == 0 {
		seed = mrand.Uint64()
	}
	p.rng = mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p.total = -1
	if c.Requests > 0 {
		p.total = c.Warmup + c.Requests
	}
	if c.Admin != "" {
		p.joiner = &Joiner{Admin: c.Admin, Client: &http.Client{Transport: tr, Timeout: 2 * time.Second}}
	}
	return p, nil
}

func (p *probe) now() time.Duration { return time.Since(p.base) }

func (p *probe) run(ctx context.Context) *Run {
	out := &Run{Config: p.cfg}
	if p.joiner != nil {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := p.joiner.Check(cctx); err != nil {
			p.joinNote = fmt.Sprintf("admin endpoint %s not reachable (%v): client-side numbers only", p.cfg.Admin, err)
			p.joiner = nil
		}
		cancel()
	} else {
		p.joinNote = "no admin endpoint given: client-side numbers only"
	}
	if p.joiner != nil {
		p.joinQ = make(chan *Result, 1024)
		for range 2 {
			p.joinWG.Add(1)
			go p.joinWorker(ctx)
		}
	}
	stopProgress := p.progress()
	p.base = time.Now()
	if p.cfg.Rate > 0 {
		p.openLoop(ctx)
	} else {
		p.closedLoop(ctx)
	}
	stopProgress()
	if p.joinQ != nil {
		close(p.joinQ)
		p.joinWG.Wait()
	}
	if p.ownTrans != nil {
		p.ownTrans.CloseIdleConnections()
	}
	out.JoinNote = p.joinNote
	if id := p.joinMissed.Load(); id != nil && !p.joined.Load() {
		out.JoinNote = fmt.Sprintf("admin endpoint %s has no record of request %s: client-side numbers only", p.cfg.Admin, *id)
	}
	out.Results = make([]Result, len(p.results))
	var first, last time.Duration = -1, 0
	for i, r := range p.results {
		out.Results[i] = *r
		if r.Warmup {
			continue
		}
		if first < 0 || r.Start < first {
			first = r.Start
		}
		last = max(last, r.Start+r.E2E)
	}
	if first >= 0 {
		out.Elapsed = last - first
	}
	return out
}

// next reserves the next request's sequence number, or reports that the
// run is over (count reached, duration passed, or ctx cancelled).
func (p *probe) next(ctx context.Context) (int, bool) {
	if ctx.Err() != nil {
		return 0, false
	}
	seq := int(p.started.Add(1)) - 1
	if p.total >= 0 && seq >= p.total {
		return 0, false
	}
	if p.cfg.Duration > 0 && seq >= p.cfg.Warmup {
		m := p.measure.Load()
		if m == 0 {
			p.measure.CompareAndSwap(0, int64(p.now())|1)
			m = p.measure.Load()
		}
		if p.now()-time.Duration(m) > p.cfg.Duration {
			return 0, false
		}
	}
	return seq, true
}

func (p *probe) closedLoop(ctx context.Context) {
	var wg sync.WaitGroup
	for range p.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				seq, ok := p.next(ctx)
				if !ok {
					return
				}
				p.do(ctx, seq, -1)
			}
		}()
	}
	wg.Wait()
}

// openLoop starts requests at Poisson arrivals: exponential gaps of mean
// 1/Rate, on an absolute schedule so that a late start does not shift the
// ones after it.
func (p *probe) openLoop(ctx context.Context) {
	var wg sync.WaitGroup
	due := time.Duration(0)
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		seq, ok := p.next(ctx)
		if !ok {
			break
		}
		if wait := due - p.now(); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				wg.Wait()
				return
			}
		}
		wg.Add(1)
		go func(seq int, due time.Duration) {
			defer wg.Done()
			p.do(ctx, seq, due)
		}(seq, due)
		p.rngMu.Lock()
		gap := p.rng.ExpFloat64() / p.cfg.Rate
		p.rngMu.Unlock()
		due += time.Duration(gap * float64(time.Second))
	}
	wg.Wait()
}

// body builds request seq's JSON body.
func (p *probe) body(seq int) []byte {
	c := &p.cfg
	p.rngMu.Lock()
	promptLen := c.PromptTokens.Sample(p.rng)
	outLen := c.OutputTokens.Sample(p.rng)
	p.rngMu.Unlock()
	m := map[string]any{"model": c.Model, "stream": !c.NoStream}
	if !c.NoStream {
		m["stream_options"] = map[string]any{"include_usage": true}
	}
	if outLen > 0 {
		m["max_tokens"] = outLen
	}
	if c.IgnoreEOS {
		m["ignore_eos"] = true
	}
	var pr Prompt
	if len(c.Prompts) > 0 {
		pr = c.Prompts[seq%len(c.Prompts)]
	} else {
		pr = Prompt{Text: words(promptLen, seq)}
	}
	switch {
	case c.Completions:
		m["prompt"] = pr.completionText()
	case pr.Messages != nil:
		m["messages"] = pr.Messages
	default:
		m["messages"] = []map[string]string{{"role": "user", "content": pr.Text}}
	}
	b, _ := json.Marshal(m) // only maps, strings, numbers and raw JSON
	return b
}

var vocabulary = strings.Fields("the quick brown fox jumps over a lazy dog while seven small cats watch from an old red barn near the river on a cold morning in spring")

// words returns n words (about n tokens), starting at a different word for
// each seq so that prompts do not share a long common prefix.
func words(n, seq int) string {
	if n <= 0 {
		return "hi"
	}
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocabulary[(i*7+seq)%len(vocabulary)])
	}
	return b.String()
}

// do sends request seq, due at the run-clock time due (negative: now, for
// the closed loop), and records it.
func (p *probe) do(ctx context.Context, seq int, due time.Duration) {
	r := &Result{ID: fmt.Sprintf("%s-%06d", p.prefix, seq), Seq: seq, Warmup: seq < p.cfg.Warmup}
	body := p.body(seq)
	if p.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.Timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		r.End, r.Err = "error", err.Error()
		p.finish(r)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	if !p.cfg.NoStream {
		req.Header.Set("Accept", "text/event-stream")
	}
	if p.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+p.cfg.APIKey)
	}
	for k, vs := range p.cfg.Header {
		req.Header[k] = vs
	}
	req.Header.Set("X-Request-Id", r.ID)

	sent := p.now()
	if due < 0 {
		due = sent
	}
	r.Start, r.Lag = due, sent-due
	resp, err := p.client.Do(req)
	if err != nil {
		r.E2E = p.now() - due
		r.End, r.Err = clientEnd(ctx, "error"), err.Error()
		r.unsent = isDialError(err)
		p.finish(r)
		return
	}
	if id := resp.Header.Get("X-Request-Id"); id != "" {
		r.ID = id // the proxy keeps a sane id; a different one is what it recorded
	}
	r.Status = resp.StatusCode
	if resp.StatusCode/100 != 2 {
		head, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		r.E2E = p.now() - due
		r.End, r.Err = fmt.Sprintf("http_%d", resp.StatusCode), httpError(resp.StatusCode, head)
		p.finish(r)
		return
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		p.readStream(ctx, r, resp.Body, due)
	} else {
		p.readWhole(ctx, r, resp.Body, due)
	}
	resp.Body.Close()
	p.finish(r)
}

// httpError is the error text of a non-2xx response: its status and the
// message of an OpenAI-style error body ({"error": {"message": ...}} or
// {"error": "..."}), else the body's first line.
func httpError(status int, body []byte) string {
	text := fmt.Sprintf("HTTP %d", status)
	if st := http.StatusText(status); st != "" {
		text += " " + st
	}
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	msg := ""
	if json.Unmarshal(body, &e) == nil && len(e.Error) > 0 {
		var obj struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(e.Error, &msg) != nil && json.Unmarshal(e.Error, &obj) == nil {
			msg = obj.Message
		}
	} else {
		msg, _, _ = strings.Cut(string(bytes.TrimSpace(body)), "\n")
	}
	if msg = strings.TrimSpace(msg); msg != "" {
		text += ": " + msg
	}
	return text
}

// clientEnd names a failure: "timeout" when our own deadline cut it.
func clientEnd(ctx context.Context, otherwise string) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "timeout"
	}
	if ctx.Err() != nil {
		return "cancelled"
	}
	return otherwise
}

// chunk is what the probe reads from an OpenAI chunk or response.
type chunk struct {
	Choices []struct {
		Delta struct {
			Content          string          `json:"content"`
			ReasoningContent string          `json:"reasoning_content"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// content reports whether the chunk carries generated output, with the
// proxy's rule: non-empty content, reasoning, text or tool-call deltas.
func (c *chunk) content() bool {
	for _, ch := range c.Choices {
		d := &ch.Delta
		if d.Content != "" || d.ReasoningContent != "" || ch.Text != "" || ch.Message.Content != "" ||
			len(d.ToolCalls) > 0 && string(d.ToolCalls) != "null" && string(d.ToolCalls) != "[]" {
			return true
		}
	}
	return false
}

// readStream reads an event stream line by line from the body as it
// arrives (bufio only holds what one read returned) and times each event
// on the run clock the moment the line that completes it is read.
func (p *probe) readStream(ctx context.Context, r *Result, body io.Reader, due time.Duration) {
	br := bufio.NewReaderSize(body, 4<<10)
	var data []byte // the event's data, lines joined with \n
	var long []byte // a line longer than the buffer, being assembled
	var last time.Duration
	usageTokens, done, finished := -1, false, false
	for {
		line, err := br.ReadSlice('\n')
		at := p.now()
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, line...)
			continue
		}
		if long != nil {
			line = append(long, line...)
			long = nil
		}
		if err != nil && len(line) == 0 {
			r.E2E = at - due
			switch {
			case err == io.EOF && (done || finished):
				r.End = "done"
			case err == io.EOF:
				r.End = "cut"
			default:
				r.End, r.Err = clientEnd(ctx, "cut"), err.Error()
			}
			break
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) != 0 {
			if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				v = bytes.TrimPrefix(v, []byte(" "))
				if data != nil {
					data = append(data, '\n')
				}
				data = append(data, v...)
			}
			continue
		}
		if data == nil { // a blank line after a comment or nothing
			continue
		}
		ev := data
		data = nil
		if string(ev) == "[DONE]" {
			done = true
			continue
		}
		var c chunk
		if json.Unmarshal(ev, &c) != nil {
			continue
		}
		if len(c.Error) > 0 && string(c.Error) != "null" {
			r.End, r.Err = "error_event", string(c.Error)
			r.E2E = at - due
			_, _ = io.Copy(io.Discard, br)
			break
		}
		if c.content() {
			if !r.HasTTFT {
				r.HasTTFT, r.TTFT = true, at-due
			} else {
				r.Gaps = append(r.Gaps, at-last)
			}
			last = at
			r.Tokens++
		}
		for _, ch := range c.Choices {
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				r.Finish, finished = *ch.FinishReason, true
			}
		}
		if c.Usage != nil {
			usageTokens = c.Usage.CompletionTokens
		}
	}
	if usageTokens >= 0 {
		r.Tokens = usageTokens
	}
}

// readWhole reads a non-streamed response: the first token arrives with
// the complete body.
func (p *probe) readWhole(ctx context.Context, r *Result, body io.Reader, due time.Duration) {
	b, err := io.ReadAll(io.LimitReader(body, 64<<20))
	at := p.now()
	r.E2E = at - due
	if err != nil {
		r.End, r.Err = clientEnd(ctx, "cut"), err.Error()
		return
	}
	var c chunk
	if err := json.Unmarshal(b, &c); err != nil {
		r.End, r.Err = "cut", "response is not JSON: "+err.Error()
		return
	}
	r.End = "done"
	if c.content() {
		r.HasTTFT, r.TTFT = true, at-due
	}
	for _, ch := range c.Choices {
		if ch.FinishReason != nil {
			r.Finish = *ch.FinishReason
		}
	}
	if c.Usage != nil {
		r.Tokens = c.Usage.CompletionTokens
	} else if r.HasTTFT {
		r.Tokens = 1
	}
}

// finish stores r and hands it to the joiners, unless it never reached
// the server.
func (p *probe) finish(r *Result) {
	p.mu.Lock()
	p.results = append(p.results, r)
	p.mu.Unlock()
	p.done.Add(1)
	switch {
	case r.Warmup:
		return
	case r.OK():
		p.ok.Add(1)
	default:
		p.errs.Add(1)
	}
	if p.joinQ != nil && !r.unsent {
		p.joinQ <- r
	}
}

// joinWorker fetches the records of the results it is handed. Once the
// admin endpoint has had no record of a request while none was found,
// the rest are not fetched: each would wait out Joiner.Wait in vain.
func (p *probe) joinWorker(ctx context.Context) {
	defer p.joinWG.Done()
	for r := range p.joinQ {
		if p.joinMissed.Load() != nil && !p.joined.Load() {
			r.JoinErr = "not fetched: the admin endpoint had no record of an earlier request"
			continue
		}
		rec, err := p.joiner.Fetch(ctx, r.ID)
		switch {
		case err == nil:
			p.joined.Store(true)
			r.Record = &rec
		case errors.Is(err, ErrNoRecord) && !p.joined.Load():
			p.joinMissed.CompareAndSwap(nil, &r.ID)
			fallthrough
		default:
			r.JoinErr = err.Error()
		}
	}
}

// progress starts the progress display and returns its stop function.
func (p *probe) progress() func() {
	w := p.cfg.Progress
	if w == nil {
		return func() {}
	}
	every := 5 * time.Second
	if p.cfg.ProgressTTY {
		every = 200 * time.Millisecond
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				if p.cfg.ProgressTTY {
					p.drawBar(w)
					fmt.Fprintln(w)
				}
				return
			case <-t.C:
				if p.cfg.ProgressTTY {
					p.drawBar(w)
				} else {
					fmt.Fprintf(w, "bench: %s\n", p.status())
				}
			}
		}
	}()
	return func() { close(stop); <-stopped }
}

func (p *probe) status() string {
	done, errs := p.done.Load(), p.errs.Load()
	el := p.now().Seconds()
	s := fmt.Sprintf("%d done", done)
	if p.total > 0 {
		s = fmt.Sprintf("%d/%d done", done, p.total)
	}
	return fmt.Sprintf("%s, %d errors, %.1f s, %.1f completed/s", s, errs, el, float64(p.ok.Load())/max(el, 1e-9))
}

// drawBar redraws a one-line bar: by count, or by time for a duration run.
func (p *probe) drawBar(w io.Writer) {
	const width = 30
	frac := 0.0
	if p.total > 0 {
		frac = float64(p.done.Load()) / float64(p.total)
	} else if p.cfg.Duration > 0 {
		frac = p.now().Seconds() / p.cfg.Duration.Seconds()
	}
	n := min(max(int(frac*width), 0), width)
	fmt.Fprintf(w, "\r[%s%s] %s\x1b[K", strings.Repeat("#", n), strings.Repeat(".", width-n), p.status())
}
