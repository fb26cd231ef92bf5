package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// clientConfig is one run of the client mode: either a closed loop
// (conc workers, each with a keep-alive connection, requests in all) or
// open streams (requests streams, each on its own connection, their starts
// spread evenly over the ramp, a whole number of token intervals, so events
// arrive at a steady rate rather than all at once).
type clientConfig struct {
	Addr     string
	Tokens   int
	Interval time.Duration
	Requests int
	Conc     int  // closed loop: workers; 0 for open streams
	Open     bool // every request its own connection, all open at once
	Ramp     time.Duration
	// Reset closes each connection with a reset (SO_LINGER 0), leaving no
	// TIME_WAIT: at thousands of new connections a second the client's
	// ephemeral ports would otherwise wait out 60 s each.
	Reset bool
}

// clientResult is what a run reports to the orchestrator (JSON on stdout).
type clientResult struct {
	Requests   int
	OK         int
	Errors     int
	FirstError string
	Events     int   // token events received
	TTFTP50    int64 // ns, request written to first event read
	GapP50     int64 // ns, per event: arrival gap minus send gap
	GapP99     int64
	GapMax     int64
	// Open streams: ns, the dial begun to the first event read (a new
	// client's wait, its connection included), p50 and p99.
	ConnTTFTP50, ConnTTFTP99 int64
	// Open streams: ns, how far behind its schedule the last stream began
	// (the client could not hold the rate when it is a fair part of the ramp).
	StartLag int64
	// The plateau, wall clock (Unix ns): from every stream's first event
	// to the first stream's end (open streams only).
	AllOpen, FirstEnd int64
	// Token events by arrival (open streams only): Arrivals[i] arrived in
	// the arrivalBucket starting i buckets after ArrivalBase (Unix ns).
	ArrivalBase int64
	Arrivals    []int32
	Seconds     float64
}

// arrivalBucket is the resolution of clientResult.Arrivals.
const arrivalBucket = 10 * time.Millisecond

// timedConn remembers when its last Read returned: the arrival time of
// everything that read brought.
type timedConn struct {
	net.Conn
	base time.Time
	last time.Duration
}

func (c *timedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.last = time.Since(c.base)
	return n, err
}

// streamStats is what one stream measured.
type streamStats struct {
	ttft     time.Duration
	connTTFT time.Duration // from the dial, when this exchange dialed
	gaps     []int64
	tokens   int
}

type clientRun struct {
	cfg      clientConfig
	base     time.Time
	body     []byte
	head     []byte
	mu       sync.Mutex
	res      clientResult
	ttfts    []int64
	conns    []int64 // open streams: connTTFTs
	gaps     []int64
	started  atomic.Int64 // streams whose first event arrived
	done     atomic.Int64
	failed   atomic.Int64
	allOpen  atomic.Int64
	firstEnd atomic.Int64
	arrivals []atomic.Int32 // open streams: token events by arrival, per arrivalBucket since base
}

func runClient(cfg clientConfig) clientResult {
	r := &clientRun{cfg: cfg, base: time.Now()}
	r.body = []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"Say something."}]}`)
	r.head = fmt.Appendf(nil, "POST /v1/chat/completions HTTP/1.1\r\nHost: scale\r\nContent-Type: application/json\r\n%s: %d\r\n%s: %d\r\nContent-Length: %d\r\n\r\n",
		headerTokens, cfg.Tokens, headerInterval, cfg.Interval.Microseconds(), len(r.body))
	r.res.Requests = cfg.Requests
	if cfg.Open {
		// Twice the run's length, in case the path is slow; later events
		// count in the last bucket.
		r.arrivals = make([]atomic.Int32, 2*(cfg.Ramp+time.Duration(cfg.Tokens)*cfg.Interval)/arrivalBucket+100)
	}
	stop := make(chan struct{})
	go r.progress(stop)
	t0 := time.Now()
	var wg sync.WaitGroup
	var lag time.Duration // the last open stream's, behind its schedule
	if cfg.Open {
		spread := max(cfg.Ramp, time.Millisecond)
		for i := range cfg.Requests {
			at := t0.Add(spread * time.Duration(i) / time.Duration(cfg.Requests))
			time.Sleep(time.Until(at))
			lag = time.Since(at)
			wg.Go(func() {
				var c *timedConn
				r.stream(&c)
				if c != nil {
					c.Close()
				}
			})
		}
	} else {
		var next atomic.Int64
		for range cfg.Conc {
			wg.Go(func() {
				var c *timedConn
				for next.Add(1) <= int64(cfg.Requests) {
					r.stream(&c)
				}
				if c != nil {
					c.Close()
				}
			})
		}
	}
	wg.Wait()
	close(stop)
	r.res.Seconds = time.Since(t0).Seconds()
	r.res.TTFTP50 = percentile(r.ttfts, 50)
	r.res.ConnTTFTP50, r.res.ConnTTFTP99 = percentile(r.conns, 50), percentile(r.conns, 99)
	r.res.StartLag = int64(lag)
	r.res.GapP50, r.res.GapP99, r.res.GapMax = percentile(r.gaps, 50), percentile(r.gaps, 99), percentile(r.gaps, 100)
	r.res.AllOpen, r.res.FirstEnd = r.allOpen.Load(), r.firstEnd.Load()
	if cfg.Open {
		r.res.ArrivalBase = r.base.UnixNano()
		r.res.Arrivals = make([]int32, len(r.arrivals))
		for i := range r.arrivals {
			r.res.Arrivals[i] = r.arrivals[i].Load()
		}
	}
	return r.res
}

// progress prints a line every two seconds on stderr.
func (r *clientRun) progress(stop chan struct{}) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			fmt.Fprintf(os.Stderr, "    %5.0fs  streams started %d, done %d, failed %d of %d\n",
				time.Since(r.base).Seconds(), r.started.Load(), r.done.Load(), r.failed.Load(), r.cfg.Requests)
		}
	}
}

// stream runs one request on *c, dialing when there is no connection; it
// leaves *c nil when the connection cannot be reused.
func (r *clientRun) stream(c **timedConn) {
	st, err := r.exchange(c)
	if err != nil && *c != nil {
		(*c).Close()
		*c = nil
	}
	if err == nil && st.tokens != r.cfg.Tokens {
		err = fmt.Errorf("%d tokens, want %d", st.tokens, r.cfg.Tokens)
	}
	if r.cfg.Open {
		r.firstEnd.CompareAndSwap(0, time.Now().UnixNano())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed.Add(1)
		r.res.Errors++
		if r.res.FirstError == "" {
			r.res.FirstError = err.Error()
		}
		return
	}
	r.done.Add(1)
	r.res.OK++
	r.res.Events += st.tokens
	r.ttfts = append(r.ttfts, int64(st.ttft))
	if r.cfg.Open {
		r.conns = append(r.conns, int64(st.connTTFT))
	}
	r.gaps = append(r.gaps, st.gaps...)
}

var errNotChunked = errors.New("response is not chunked")

func (r *clientRun) exchange(cp **timedConn) (streamStats, error) {
	var st streamStats
	dialed := time.Duration(-1)
	if *cp == nil {
		dialed = time.Since(r.base)
		nc, err := net.Dial("tcp", r.cfg.Addr)
		if err != nil {
			r.markStarted() // it will not start: do not hold the plateau back
			return st, err
		}
		if r.cfg.Reset {
			_ = nc.(*net.TCPConn).SetLinger(0)
		}
		*cp = &timedConn{Conn: nc, base: r.base}
	}
	c := *cp
	_ = c.SetDeadline(time.Now().Add(time.Duration(r.cfg.Tokens)*r.cfg.Interval + 60*time.Second))
	sent := time.Since(r.base)
	if _, err := c.Write(append(r.head[:len(r.head):len(r.head)], r.body...)); err != nil {
		r.markStarted()
		return st, err
	}
	br := bufio.NewReaderSize(c, 4096)
	reuse, err := readHead(br)
	if err != nil {
		r.markStarted()
		return st, err
	}
	var event []byte
	var lastTS, lastAt int64
	done := false
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return st, err
		}
		size, err := strconv.ParseInt(string(bytes.TrimRight(line, "\r\n")), 16, 64)
		if err != nil {
			return st, fmt.Errorf("chunk size %q: %w", line, err)
		}
		if size == 0 {
			break
		}
		start := len(event)
		event = slices.Grow(event, int(size))[:start+int(size)]
		if _, err := io.ReadFull(br, event[start:]); err != nil {
			return st, err
		}
		if _, err := br.Discard(2); err != nil {
			return st, err
		}
		for {
			end := bytes.Index(event, []byte("\n\n"))
			if end < 0 {
				break
			}
			ev := event[:end]
			at := int64(c.last)
			if i := bytes.Index(ev, []byte(`"ts":`)); i >= 0 {
				ts, _ := strconv.ParseInt(string(bytes.TrimRight(ev[i+5:], "}")), 10, 64)
				if st.tokens == 0 {
					st.ttft = time.Duration(at) - sent
					if dialed >= 0 {
						st.connTTFT = time.Duration(at) - dialed
					}
					r.markStarted()
				} else {
					st.gaps = append(st.gaps, (at-lastAt)-(ts-lastTS))
				}
				st.tokens++
				lastTS, lastAt = ts, at
				if n := len(r.arrivals); n > 0 {
					r.arrivals[min(int(at/int64(arrivalBucket)), n-1)].Add(1)
				}
			} else if bytes.Contains(ev, []byte("[DONE]")) {
				done = true
			}
			event = event[:copy(event, event[end+2:])]
		}
	}
	for { // trailers, up to the blank line
		line, err := br.ReadSlice('\n')
		if err != nil {
			return st, err
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			break
		}
	}
	if br.Buffered() > 0 {
		return st, errors.New("bytes after the response")
	}
	if !done {
		return st, errors.New("no [DONE]")
	}
	if !reuse {
		c.Close()
		*cp = nil
	}
	return st, nil
}

func (r *clientRun) markStarted() {
	if r.started.Add(1) == int64(r.cfg.Requests) && r.cfg.Open {
		r.allOpen.Store(time.Now().UnixNano())
	}
}

// readHead reads the status line and headers of a 200 chunked response;
// it reports whether the connection may be reused.
func readHead(br *bufio.Reader) (bool, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return false, err
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
		return false, fmt.Errorf("status %q", bytes.TrimSpace(line))
	}
	chunked, reuse := false, true
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return false, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			reuse = !bytes.EqualFold(value, []byte("close"))
		}
	}
	if !chunked {
		return false, errNotChunked
	}
	return reuse, nil
}

// percentile returns the p-th percentile (nearest rank) of v, sorting it.
func percentile(v []int64, p float64) int64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	i := int(float64(len(v))*p/100+0.5) - 1
	return v[min(max(i, 0), len(v)-1)]
}

// clientMain is the client mode's entry point: the result as JSON on stdout.
func clientMain(cfg clientConfig) {
	res := runClient(cfg)
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
}
