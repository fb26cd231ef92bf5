package sse_test

import (
	"bytes"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/sse"
)

const benchEvents = 1000

// openAIStream returns benchEvents OpenAI chat completion chunks (about 150 bytes
// each) ending with "data: [DONE]", and the end offset of each event.
func openAIStream() ([]byte, []int) {
	var b []byte
	var ends []int
	for i := range benchEvents - 1 {
		b = append(b, `data: {"id":"chatcmpl-9xKq2","object":"chat.completion.chunk","created":1718000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":" tok`...)
		b = strconv.AppendInt(b, int64(i%1000), 10)
		b = append(b, `"},"finish_reason":null}]}`+"\n\n"...)
		ends = append(ends, len(b))
	}
	b = append(b, "data: [DONE]\n\n"...)
	return b, append(ends, len(b))
}

// multilineCRLFStream returns benchEvents CRLF events with an event type, an id and
// three data lines each (about 150 bytes), ending with "data: [DONE]".
func multilineCRLFStream() ([]byte, []int) {
	var b []byte
	var ends []int
	for i := range benchEvents - 1 {
		b = append(b, "event: content_block_delta\r\nid: "...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, "\r\ndata: {\"type\":\"content_block_delta\",\r\ndata: \"index\":0,\"delta\":{\"type\":\"text_delta\",\r\ndata: \"text\":\"token\"}}\r\n\r\n"...)
		ends = append(ends, len(b))
	}
	b = append(b, "data: [DONE]\r\n\r\n"...)
	return b, append(ends, len(b))
}

// eventReader returns one event per Read, as an upstream that flushes per event does.
type eventReader struct {
	stream []byte
	ends   []int
	pos, i int
}

func (e *eventReader) Read(p []byte) (int, error) {
	if e.pos == len(e.stream) {
		return 0, io.EOF
	}
	n := copy(p, e.stream[e.pos:e.ends[e.i]])
	e.pos += n
	if e.pos == e.ends[e.i] {
		e.i++
	}
	return n, nil
}

// BenchmarkScanner parses whole streams of benchEvents events, read either in large
// reads ("bulk") or one event per Read ("per-event"), and checks the result each time.
func BenchmarkScanner(b *testing.B) {
	streams := []struct {
		name string
		gen  func() ([]byte, []int)
	}{
		{"openai-lf", openAIStream},
		{"multiline-crlf", multilineCRLFStream},
	}
	for _, st := range streams {
		stream, ends := st.gen()
		for _, mode := range []string{"bulk", "per-event"} {
			b.Run(st.name+"/"+mode, func(b *testing.B) {
				var br bytes.Reader
				var er eventReader
				s := sse.NewScanner(nil, 0)
				b.SetBytes(int64(len(stream)))
				b.ReportAllocs()
				start := time.Now()
				n := 0
				for b.Loop() {
					if mode == "bulk" {
						br.Reset(stream)
						s.Reset(&br)
					} else {
						er = eventReader{stream: stream, ends: ends}
						s.Reset(&er)
					}
					events := 0
					var last []byte
					for {
						ev, err := s.Next()
						if err != nil {
							if err != io.EOF {
								b.Fatal(err)
							}
							break
						}
						events++
						last = ev.Data
					}
					if events != benchEvents || string(last) != "[DONE]" {
						b.Fatalf("got %d events, last %q", events, last)
					}
					n++
				}
				b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(n*benchEvents), "ns/event")
			})
		}
	}
}
