package spanjoin

import (
	"bytes"
	"net/http/httptest"
	"testing"

	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/receiver"
	"github.com/ttftlens/ttftlens/record"
)

type discard struct{}

func (discard) Emit(*record.Record) {}

// BenchmarkJoin is the receiver's cost per joined span: an OTLP/HTTP export
// request of 64 vLLM request spans (protobuf, as the SDK batches them)
// decoded, read and joined to the 64 records waiting for them, and those
// records written; the records' wait (Emit, a copy and a timer each) is in
// it too. Reported per span.
func BenchmarkJoin(b *testing.B) {
	const batch = 64
	j := New(discard{}, Options{})
	h := receiver.New(j, receiver.Options{}).Handler()
	recs := make([]*record.Record, batch)
	var spans []*tracepb.Span
	for i := range recs {
		recs[i] = newRecord(i, engines.KindVLLM)
		spans = append(spans, vllmSpan(recs[i]))
	}
	body, err := proto.Marshal(&collectortracepb.ExportTraceServiceRequest{ResourceSpans: export(spans...)})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range recs {
			j.Emit(r)
		}
		req := httptest.NewRequest("POST", receiver.TracesPath, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/x-protobuf")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	if j.Waiting() != 0 {
		b.Fatalf("%d records did not join", j.Waiting())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/span")
}
