package sse_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/ttftlens/ttftlens/sse"
)

// rec is one block, or the final error, as plain values for comparison and golden
// files. Pointers distinguish "absent" from "empty".
type rec struct {
	Raw      string  `json:"raw"`
	Data     *string `json:"data,omitempty"`
	Type     string  `json:"type,omitempty"`
	ID       *string `json:"id,omitempty"`
	Retry    *int64  `json:"retry,omitempty"`
	Comment  *string `json:"comment,omitempty"`
	Comments int     `json:"comments,omitempty"`
	Err      string  `json:"err,omitempty"`
}

func ptr[T any](v T) *T { return &v }

// toRec copies ev out of the Scanner's buffers.
func toRec(ev sse.Event) rec {
	r := rec{Raw: string(ev.Raw), Type: string(ev.Type), Comments: ev.Comments}
	if ev.HasData {
		r.Data = ptr(string(ev.Data))
	}
	if ev.HasID {
		r.ID = ptr(string(ev.ID))
	}
	if ev.Retry >= 0 {
		r.Retry = ptr(ev.Retry)
	}
	if ev.Comments > 0 {
		r.Comment = ptr(string(ev.Comment))
	}
	return r
}

// collect reads every block of rd with a new Scanner. The last rec holds the error
// (with the partial bytes in Raw) unless the stream ended cleanly with io.EOF.
func collect(t testing.TB, rd io.Reader, limit int) []rec {
	t.Helper()
	s := sse.NewScanner(rd, limit)
	return collectFrom(t, s)
}

// collectReady is collect asking Ready before every Next: the blocks are
// the same, Ready never reads, and a Next after a true Ready does not
// read either.
func collectReady(t testing.TB, rd io.Reader, limit int) []rec {
	t.Helper()
	cr := &callReader{rd: rd}
	s := sse.NewScanner(cr, limit)
	var out []rec
	for range 1 << 20 {
		calls := cr.calls
		ready := s.Ready()
		if cr.calls != calls {
			t.Fatal("Ready read")
		}
		ev, err := s.Next()
		if ready && (err != nil || cr.calls != calls) {
			t.Fatalf("after Ready, Next = %v with %d reads", err, cr.calls-calls)
		}
		if err != nil {
			if err != io.EOF {
				out = append(out, rec{Raw: string(ev.Raw), Err: err.Error()})
			}
			return out
		}
		out = append(out, toRec(ev))
	}
	t.Fatal("too many blocks")
	return nil
}

// callReader counts the reads of rd.
type callReader struct {
	rd    io.Reader
	calls int
}

func (c *callReader) Read(p []byte) (int, error) {
	c.calls++
	return c.rd.Read(p)
}

func collectFrom(t testing.TB, s *sse.Scanner) []rec {
	t.Helper()
	var out []rec
	for range 1 << 20 {
		ev, err := s.Next()
		if err == io.EOF {
			if len(ev.Raw) != 0 {
				t.Fatalf("io.EOF with %d bytes in Raw", len(ev.Raw))
			}
			return out
		}
		if err != nil {
			if errors.Is(err, sse.ErrEventTooLarge) && (err != sse.ErrEventTooLarge || len(ev.Raw) != 0) {
				t.Fatalf("got (%q, %v), want the bare sentinel and no bytes", ev.Raw, err)
			}
			r := rec{Raw: string(ev.Raw), Err: err.Error()}
			// Errors are sticky and report the partial bytes once.
			if ev2, err2 := s.Next(); err2 != err || len(ev2.Raw) != 0 {
				t.Fatalf("second Next after %v = (%q, %v), want same error and no bytes", err, ev2.Raw, err2)
			}
			return append(out, r)
		}
		out = append(out, toRec(ev))
	}
	t.Fatal("too many blocks")
	return nil
}

// normalize folds a block that is only the LF of a CRLF whose CR ended the block
// before it back into that block. The Scanner returns such an LF alone when the
// CR was the last byte read (it never waits for the next read), so this is the one
// way results may depend on how the input was split.
func normalize(rs []rec) []rec {
	out := rs[:0:0]
	for _, r := range rs {
		if r.Raw == "\n" && r.Err == "" && r.Data == nil && r.ID == nil && r.Retry == nil && r.Comments == 0 && r.Type == "" &&
			len(out) > 0 && out[len(out)-1].Err == "" && strings.HasSuffix(out[len(out)-1].Raw, "\r") {
			out[len(out)-1].Raw += "\n"
			continue
		}
		out = append(out, r)
	}
	return out
}

// jsonLines renders recs one JSON object per line.
func jsonLines(rs []rec) string {
	var b strings.Builder
	for _, r := range rs {
		j, err := json.Marshal(r)
		if err != nil {
			panic(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// firstDiff reports the first line where got and want differ, or "".
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + ":\n got: " + gl + "\nwant: " + wl
		}
	}
	return ""
}

// oracle parses a whole stream with a deliberately naive, non-incremental reading
// of the WHATWG rules; the Scanner's normalized output must match it.
func oracle(in []byte, limit int) []rec {
	if limit <= 0 {
		limit = sse.DefaultLimit
	}
	var out []rec
	start, pos := 0, 0
	if bytes.HasPrefix(in, []byte("\xEF\xBB\xBF")) {
		pos = 3
	}
	var (
		data     []string
		typ      string
		id       *string
		retry    *int64
		comment  *string
		comments int
	)
	for {
		i := bytes.IndexAny(in[pos:], "\r\n")
		if i < 0 {
			switch {
			case len(in)-start >= limit:
				out = append(out, rec{Err: sse.ErrEventTooLarge.Error()})
			case len(in) > start:
				out = append(out, rec{Raw: string(in[start:]), Err: io.ErrUnexpectedEOF.Error()})
			}
			return out
		}
		e := pos + i
		if e-start >= limit {
			return append(out, rec{Err: sse.ErrEventTooLarge.Error()})
		}
		next := e + 1
		if in[e] == '\r' && next < len(in) && in[next] == '\n' {
			next++
		}
		line := string(in[pos:e])
		pos = next
		if line == "" {
			r := rec{Raw: string(in[start:pos]), Type: typ, ID: id, Retry: retry, Comment: comment, Comments: comments}
			if len(data) > 0 {
				r.Data = ptr(strings.Join(data, "\n"))
			}
			out = append(out, r)
			start = pos
			data, typ, id, retry, comment, comments = nil, "", nil, nil, nil, 0
			continue
		}
		if line[0] == ':' {
			if comments == 0 {
				comment = ptr(strings.TrimPrefix(line[1:], " "))
			}
			comments++
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "data":
			data = append(data, value)
		case "event":
			typ = value
		case "id":
			if !strings.Contains(value, "\x00") {
				id = ptr(value)
			}
		case "retry":
			if value != "" && strings.Trim(value, "0123456789") == "" {
				if n, err := strconv.ParseInt(value, 10, 64); err == nil {
					retry = ptr(n)
				}
			}
		}
	}
}

// chunkReader returns its input in reads of the given sizes (then the rest in
// one read), each also bounded by the caller's buffer.
type chunkReader struct {
	in     []byte
	chunks []int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.in) == 0 {
		return 0, io.EOF
	}
	n := len(c.in)
	if len(c.chunks) > 0 {
		n = min(n, c.chunks[0])
		c.chunks = c.chunks[1:]
	}
	n = copy(p, c.in[:n])
	c.in = c.in[n:]
	return n, nil
}

// splitReader returns in[:at] and in[at:] in separate reads.
func splitReader(in []byte, at int) io.Reader {
	return &chunkReader{in: in, chunks: []int{at}}
}
