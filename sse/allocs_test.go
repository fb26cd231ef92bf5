//go:build !race

package sse_test

import (
	"testing"

	"github.com/ttftlens/ttftlens/sse"
)

// allocStream mixes every kind of block so each parser path runs in steady state.
const allocStream = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n" +
	"event: delta\r\nid: 7\r\nretry: 100\r\ndata: one\r\ndata: two\r\ndata: three\r\n\r\n" +
	": ping\n\n" +
	"data: cr\rdata: only\r\r" +
	"foo: bar\ndata\n\n"

// TestScannerZeroAllocs checks that Next allocates nothing per block once the
// buffers have grown, for whole and tiny reads.
func TestScannerZeroAllocs(t *testing.T) {
	for _, chunk := range []int{0, 1, 13, 150} {
		s := sse.NewScanner(&loopReader{stream: []byte(allocStream), chunk: chunk}, 0)
		next := func() {
			ev, err := s.Next()
			if err != nil || len(ev.Raw) == 0 {
				t.Fatalf("Next = (%q, %v)", ev.Raw, err)
			}
		}
		for range 1000 {
			next()
		}
		if n := testing.AllocsPerRun(2000, next); n != 0 {
			t.Errorf("reads of %d: %v allocs per Next, want 0", chunk, n)
		}
	}
}

// TestAppendZeroAllocs checks the writer allocates nothing into a large enough dst.
func TestAppendZeroAllocs(t *testing.T) {
	dst := make([]byte, 0, 256)
	typ, data, text := []byte("delta"), []byte("a\nb\r\nc"), []byte("closing")
	n := testing.AllocsPerRun(1000, func() {
		dst = sse.AppendEvent(dst[:0], typ, data)
		dst = sse.AppendComment(dst, text)
	})
	if n != 0 {
		t.Errorf("%v allocs, want 0", n)
	}
}
