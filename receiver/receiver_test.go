package receiver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// spans is a Consumer keeping what it was given.
type spans struct {
	mu  sync.Mutex
	got []*tracepb.Span
}

func (s *spans) ConsumeSpans(rs []*tracepb.ResourceSpans) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rs {
		for _, ss := range r.GetScopeSpans() {
			s.got = append(s.got, ss.GetSpans()...)
		}
	}
}

func (s *spans) n() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

// request is an export request of n spans of the trace 0x01…, named span0…
func request(n int) *collectortracepb.ExportTraceServiceRequest {
	var ss []*tracepb.Span
	for i := range n {
		ss = append(ss, &tracepb.Span{
			TraceId: bytes.Repeat([]byte{1}, 16), SpanId: []byte{2, 2, 2, 2, 2, 2, 2, byte(i)},
			ParentSpanId: bytes.Repeat([]byte{3}, 8), Name: fmt.Sprintf("span%d", i),
		})
	}
	return &collectortracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: ss}}}}}
}

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gzipped(b []byte) []byte {
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	w.Write(b)
	w.Close()
	return out.Bytes()
}

// OTLP's JSON encoding: ids in hex, not protojson's base64.
const jsonRequest = `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","parentSpanId":"1112131415161718","name":"llm_request","kind":2}]}]}]}`

func TestHTTP(t *testing.T) {
	tests := []struct {
		name                 string
		method, path, ct, ce string
		body                 []byte
		status               int
		spans                int
		refused              Refusal // counted when status is not 200
	}{
		{"protobuf", "POST", TracesPath, contentProtobuf, "", marshal(t, request(3)), 200, 3, 0},
		{"protobuf gzip", "POST", TracesPath, contentProtobuf, "gzip", gzipped(marshal(t, request(2))), 200, 2, 0},
		{"json", "POST", TracesPath, contentJSON, "", []byte(jsonRequest), 200, 1, 0},
		{"json with charset", "POST", TracesPath, contentJSON + "; charset=utf-8", "", []byte(jsonRequest), 200, 1, 0},
		{"empty request", "POST", TracesPath, contentProtobuf, "", nil, 200, 0, 0},
		{"not protobuf", "POST", TracesPath, contentProtobuf, "", []byte("\xff\xff\xff\xff"), 400, 0, RefusedMalformed},
		{"not json", "POST", TracesPath, contentJSON, "", []byte("{"), 400, 0, RefusedMalformed},
		{"bad gzip", "POST", TracesPath, contentProtobuf, "gzip", []byte("not gzip"), 400, 0, RefusedMalformed},
		{"unknown encoding", "POST", TracesPath, contentProtobuf, "br", marshal(t, request(1)), 400, 0, RefusedMalformed},
		{"too large", "POST", TracesPath, contentProtobuf, "", marshal(t, request(200)), 413, 0, RefusedTooLarge},
		{"too large once inflated", "POST", TracesPath, contentProtobuf, "gzip", gzipped(marshal(t, request(200))), 413, 0, RefusedTooLarge},
		{"text", "POST", TracesPath, "text/plain", "", []byte("x"), 415, 0, RefusedUnsupported},
		{"GET", "GET", TracesPath, contentProtobuf, "", nil, 405, 0, RefusedUnsupported},
		{"metrics path", "POST", "/v1/metrics", contentProtobuf, "", marshal(t, request(1)), 404, 0, RefusedUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := &spans{}
			r := New(sink, Options{MaxRequestBytes: 4 << 10})
			req := httptest.NewRequest(tt.method, tt.path, bytes.NewReader(tt.body))
			req.Header.Set("Content-Type", tt.ct)
			if tt.ce != "" {
				req.Header.Set("Content-Encoding", tt.ce)
			}
			w := httptest.NewRecorder()
			r.Handler().ServeHTTP(w, req)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d (%s)", w.Code, tt.status, w.Body)
			}
			if sink.n() != tt.spans {
				t.Errorf("spans consumed %d, want %d", sink.n(), tt.spans)
			}
			wantJSON := strings.HasPrefix(tt.ct, contentJSON)
			if got := w.Header().Get("Content-Type"); got != map[bool]string{true: contentJSON, false: contentProtobuf}[wantJSON] {
				t.Errorf("answered as %q", got)
			}
			if tt.status == 200 {
				if reqs, _ := r.Received(); reqs != 1 {
					t.Errorf("requests received %d, want 1", reqs)
				}
				return
			}
			// The error is a google.rpc.Status, in the request's encoding.
			var st spb.Status
			var err error
			if wantJSON {
				err = protojson.Unmarshal(w.Body.Bytes(), &st)
			} else {
				err = proto.Unmarshal(w.Body.Bytes(), &st)
			}
			if err != nil || st.Message == "" {
				t.Errorf("error body %q is not a Status with a message: %v", w.Body, err)
			}
			if r.Refused(tt.refused) != 1 {
				t.Errorf("refused %v = %d, want 1", tt.refused, r.Refused(tt.refused))
			}
		})
	}
}

// grpcClient is a client of the receiver's gRPC server on loopback.
func grpcClient(t *testing.T, r *Receiver) collectortracepb.TraceServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := r.GRPCServer()
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return collectortracepb.NewTraceServiceClient(conn)
}

func TestGRPC(t *testing.T) {
	sink := &spans{}
	r := New(sink, Options{MaxRequestBytes: 4 << 10})
	c := grpcClient(t, r)
	if _, err := c.Export(context.Background(), request(3)); err != nil {
		t.Fatal(err)
	}
	if sink.n() != 3 {
		t.Errorf("spans consumed %d, want 3", sink.n())
	}
	_, err := c.Export(context.Background(), request(200))
	if status.Code(err) != codes.ResourceExhausted || refusedOnce(r, RefusedTooLarge) != 1 {
		t.Errorf("over the limit: %v, counted %d; want RESOURCE_EXHAUSTED, 1", err, r.Refused(RefusedTooLarge))
	}
}

// refusedOnce returns r's count of reason once it is 1, or after 10 s:
// grpc-go answers a request it cannot read (RecvMsg writes the status)
// before the handler that counts it returns, so the client may see its
// error first.
func refusedOnce(r *Receiver, reason Refusal) uint64 {
	for end := time.Now().Add(10 * time.Second); r.Refused(reason) < 1 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	return r.Refused(reason)
}

// rawCodec sends bytes as they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { *(v.(*[]byte)) = data; return nil }
func (rawCodec) Name() string                       { return "proto" }

func TestGRPCMalformed(t *testing.T) {
	sink := &spans{}
	r := New(sink, Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := r.GRPCServer()
	go srv.Serve(ln)
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	in, out := []byte("\xff\xff\xff\xff"), []byte(nil)
	err = conn.Invoke(context.Background(), collectortracepb.TraceService_Export_FullMethodName, &in, &out)
	if status.Code(err) == codes.OK || refusedOnce(r, RefusedMalformed) != 1 || sink.n() != 0 {
		t.Errorf("malformed export: %v, counted %d, spans %d; want an error, 1, 0", err, r.Refused(RefusedMalformed), sink.n())
	}
}

// A flood of concurrent exports, over both protocols, is each consumed
// once.
func TestFlood(t *testing.T) {
	sink := &spans{}
	r := New(sink, Options{})
	c := grpcClient(t, r)
	hs := httptest.NewServer(r.Handler())
	defer hs.Close()
	body := marshal(t, request(10))
	var wg sync.WaitGroup
	const n = 100
	for range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if _, err := c.Export(context.Background(), request(10)); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			resp, err := http.Post(hs.URL+TracesPath, contentProtobuf, bytes.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	wg.Wait()
	if reqs, got := r.Received(); reqs != 2*n || got != 2*n*10 || sink.n() != 2*n*10 {
		t.Errorf("requests %d spans %d consumed %d, want %d, %d, %d", reqs, got, sink.n(), 2*n, 2*n*10, 2*n*10)
	}
}

// FuzzHTTP: whatever arrives is answered with a status, and what is
// accepted is counted as consumed; nothing panics.
func FuzzHTTP(f *testing.F) {
	f.Add([]byte(jsonRequest), true, false)
	f.Add(marshal(f, request(2)), false, false)
	f.Add(gzipped(marshal(f, request(2))), false, true)
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}`), true, false)
	f.Fuzz(func(t *testing.T, body []byte, json, gz bool) {
		sink := &spans{}
		r := New(sink, Options{MaxRequestBytes: 64 << 10})
		req := httptest.NewRequest("POST", TracesPath, bytes.NewReader(body))
		req.Header.Set("Content-Type", map[bool]string{true: contentJSON, false: contentProtobuf}[json])
		if gz {
			req.Header.Set("Content-Encoding", "gzip")
		}
		w := httptest.NewRecorder()
		r.Handler().ServeHTTP(w, req)
		reqs, n := r.Received()
		switch w.Code {
		case 200:
			if reqs != 1 || int(n) != sink.n() {
				t.Fatalf("accepted: requests %d spans %d consumed %d", reqs, n, sink.n())
			}
		case 400, 413:
			if reqs != 0 || sink.n() != 0 {
				t.Fatalf("refused with %d but consumed %d spans", w.Code, sink.n())
			}
		default:
			t.Fatalf("status %d", w.Code)
		}
	})
}
