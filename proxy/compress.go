package proxy

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"sync"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Compression of event streams to the client (Config.CompressStreams). Off
// by default: each live stream holds a compressor's state (measured in
// BENCHMARKS.md), and most of an event stream's bytes are repeated JSON
// keys that a sync flush per event compresses poorly anyway. When on, every
// event is compressed and flushed on its own, so no token is held back.
const (
	CompressGzip = "gzip"
	CompressZstd = "zstd"
)

// encoder compresses one stream's events. It is taken from a pool when the
// stream starts and returned when it ends.
type encoder struct {
	name   string
	gz     *gzip.Writer
	zs     *zstd.Encoder
	buf    bytes.Buffer
	closed bool
}

var (
	gzipPool = sync.Pool{New: func() any {
		e := &encoder{name: CompressGzip}
		e.gz, _ = gzip.NewWriterLevel(&e.buf, gzip.BestSpeed)
		return e
	}}
	zstdPool = sync.Pool{New: func() any {
		e := &encoder{name: CompressZstd}
		// The small-memory settings: one goroutine-free encoder, a 64 KiB
		// window (the defaults cost about 18 MiB per stream).
		e.zs, _ = zstd.NewWriter(&e.buf, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(64<<10),
			zstd.WithLowerEncoderMem(true), zstd.WithEncoderLevel(zstd.SpeedFastest))
		return e
	}}
)

// acquireEncoder returns an encoder for the first of the configured
// encoding that the client accepts, or nil.
func acquireEncoder(configured string, acceptEncoding []byte) *encoder {
	if configured == "" || !accepts(acceptEncoding, configured) {
		return nil
	}
	var e *encoder
	if configured == CompressZstd {
		e = zstdPool.Get().(*encoder)
		e.zs.Reset(&e.buf)
	} else {
		e = gzipPool.Get().(*encoder)
		e.gz.Reset(&e.buf)
	}
	e.buf.Reset()
	e.closed = false
	return e
}

// encode compresses one event and flushes it; the result is valid until the
// next call.
func (e *encoder) encode(p []byte) []byte {
	e.buf.Reset()
	if e.gz != nil {
		e.gz.Write(p)
		e.gz.Flush()
	} else {
		e.zs.Write(p)
		e.zs.Flush()
	}
	return e.buf.Bytes()
}

// close ends the compressed stream and returns its last bytes.
func (e *encoder) close() []byte {
	e.buf.Reset()
	if e.gz != nil {
		e.gz.Close()
	} else {
		e.zs.Close()
	}
	e.closed = true
	return e.buf.Bytes()
}

// release returns e to its pool.
func (e *encoder) release() {
	if e.gz != nil {
		gzipPool.Put(e)
	} else {
		zstdPool.Put(e)
	}
}

// accepts reports whether an Accept-Encoding value allows coding (a token
// with q=0 does not).
func accepts(acceptEncoding []byte, coding string) bool {
	for _, part := range bytes.Split(acceptEncoding, []byte(",")) {
		token, params, _ := bytes.Cut(part, []byte(";"))
		if !bytes.EqualFold(bytes.TrimSpace(token), []byte(coding)) {
			continue
		}
		_, q, ok := bytes.Cut(params, []byte("q="))
		if !ok {
			return true
		}
		v, err := strconv.ParseFloat(string(bytes.TrimSpace(q)), 64)
		return err == nil && v > 0
	}
	return false
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
