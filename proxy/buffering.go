package proxy

import (
	"bytes"
	"errors"
	"io"
	"time"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// Thresholds for telling a stream that was held back upstream from one that
// arrived as it was generated. A decoder writes each event as it
// is sampled, so the proxy reads each in a read of its own, however fast
// the engine; events that were held back arrive together, many in one read.
// (Timing thresholds cannot tell the two apart: a small model on a CPU
// decodes in well under a millisecond per token.)
const (
	// burstMinEvents: fewer content events say nothing about their arrival.
	burstMinEvents = 8
	// burstShare: a stream is a burst when at least this share of its
	// content events arrived in one read with the one before.
	burstShare = 0.9
	// clientMasksArrival: blocked this long writing to the client between
	// two content events, the proxy did not read the upstream meanwhile,
	// so their arriving together says nothing about the upstream. (A
	// client that keeps up takes an event in microseconds.)
	clientMasksArrival = time.Millisecond
)

// shapeBuffering reads the signs of buffering in a response's headers.
func shapeBuffering(h *fasthttp.ResponseHeader, streaming bool) record.Buffering {
	var b record.Buffering
	eventStream := isEventStream(h.ContentType()) || isNDJSON(h.ContentType())
	if streaming && !eventStream && h.StatusCode() < 300 {
		b |= record.BufferedNotStream
	}
	if eventStream && h.ContentLength() >= 0 {
		b |= record.BufferedContentLength
	}
	if ce := h.ContentEncoding(); len(ce) > 0 && !bytes.EqualFold(ce, []byte("identity")) {
		b |= record.BufferedCompressed
	}
	return b
}

// arrivalBuffering reads the signs of buffering in how content arrived.
func arrivalBuffering(s *stages.Stream) record.Buffering {
	if s.ContentEvents < burstMinEvents {
		return 0
	}
	if float64(s.Together) < burstShare*float64(s.ContentEvents-1) {
		return 0
	}
	b := record.BufferedBurst
	if s.FirstTogether {
		// The first token was held back with the ones after it (it came in
		// one read with the second): the buffering delayed it too.
		b |= record.BufferedLateFirst
	}
	return b
}

var errUnsupportedEncoding = errors.New("upstream event stream has an unsupported Content-Encoding")

// decoder decodes a compressed upstream stream. It creates its decompressor
// on the first Read, not before: the constructor reads the stream's header,
// which would otherwise block until the engine's first bytes (prefill).
// Decompressors are kept across requests.
type decoder struct {
	src      io.Reader
	encoding []byte
	r        io.Reader
	gz       *gzip.Reader
	zs       *zstd.Decoder
	fl       io.ReadCloser
}

// reset points d at src with the given Content-Encoding; it reports false
// for an encoding it cannot decode.
func (d *decoder) reset(src io.Reader, encoding []byte) bool {
	d.src, d.encoding, d.r = src, encoding, nil
	switch string(encoding) {
	case "gzip", "x-gzip", "deflate", "zstd":
		return true
	}
	return false
}

func (d *decoder) Read(p []byte) (int, error) {
	if d.r == nil {
		if err := d.open(); err != nil {
			return 0, err
		}
	}
	return d.r.Read(p)
}

func (d *decoder) open() error {
	var err error
	switch string(d.encoding) {
	case "gzip", "x-gzip":
		if d.gz == nil {
			d.gz, err = gzip.NewReader(d.src)
		} else {
			err = d.gz.Reset(d.src)
		}
		d.r = d.gz
	case "deflate":
		if d.fl == nil {
			d.fl = flate.NewReader(d.src)
		} else {
			err = d.fl.(flate.Resetter).Reset(d.src, nil)
		}
		d.r = d.fl
	case "zstd":
		// One goroutine-free decoder per stream: the default decodes ahead
		// on goroutines of its own, which a stream that waits for its next
		// event does not need.
		if d.zs == nil {
			d.zs, err = zstd.NewReader(d.src, zstd.WithDecoderConcurrency(1))
		} else {
			err = d.zs.Reset(d.src)
		}
		d.r = d.zs
	default:
		return errUnsupportedEncoding
	}
	if err != nil {
		d.r = nil
		return err
	}
	return nil
}
