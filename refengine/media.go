package refengine

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// mediaFetcher loads image_url contents: http(s) with a timeout and a size
// limit, or data: URLs decoded in place.
type mediaFetcher struct {
	client   *http.Client
	maxBytes int64
}

func newMediaFetcher(timeout time.Duration, maxBytes int64) *mediaFetcher {
	tr := &http.Transport{
		Proxy:               nil, // the engine talks to the URL it was given
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
	}
	return &mediaFetcher{client: &http.Client{Transport: tr, Timeout: timeout}, maxBytes: maxBytes}
}

// close drops idle connections so no transport goroutine outlives the server.
func (f *mediaFetcher) close() {
	f.client.CloseIdleConnections()
}

// mediaError is a client-caused media failure: it maps to HTTP 400.
type mediaError struct{ msg string }

func (e *mediaError) Error() string { return e.msg }

// fetch returns the bytes behind rawURL. Errors the client caused (bad URL,
// unreachable host, non-2xx, too large) are *mediaError.
func (f *mediaFetcher) fetch(ctx context.Context, rawURL string) ([]byte, error) {
	if strings.HasPrefix(rawURL, "data:") {
		return f.decodeData(rawURL)
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &mediaError{fmt.Sprintf("invalid image_url %q: want an http, https or data: URL", shorten(rawURL))}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, &mediaError{fmt.Sprintf("invalid image_url %q: %v", shorten(rawURL), err)}
	}
	resp, err := f.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &mediaError{fmt.Sprintf("failed to fetch image_url %q: %v", shorten(rawURL), unwrapURLError(err))}
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, &mediaError{fmt.Sprintf("failed to fetch image_url %q: status %d", shorten(rawURL), resp.StatusCode)}
	}
	if resp.ContentLength > f.maxBytes {
		return nil, &mediaError{fmt.Sprintf("image_url %q is %d bytes, over the limit of %d", shorten(rawURL), resp.ContentLength, f.maxBytes)}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, f.maxBytes+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &mediaError{fmt.Sprintf("failed to read image_url %q: %v", shorten(rawURL), unwrapURLError(err))}
	}
	if int64(len(b)) > f.maxBytes {
		return nil, &mediaError{fmt.Sprintf("image_url %q is over the limit of %d bytes", shorten(rawURL), f.maxBytes)}
	}
	if len(b) == 0 {
		return nil, &mediaError{fmt.Sprintf("image_url %q is empty", shorten(rawURL))}
	}
	return b, nil
}

// decodeData decodes an RFC 2397 data: URL.
func (f *mediaFetcher) decodeData(raw string) ([]byte, error) {
	meta, payload, ok := strings.Cut(raw[len("data:"):], ",")
	if !ok {
		return nil, &mediaError{"invalid data: URL in image_url: no comma"}
	}
	if int64(len(payload)) > f.maxBytes*4/3+4 {
		return nil, &mediaError{fmt.Sprintf("data: URL in image_url is over the limit of %d bytes", f.maxBytes)}
	}
	var b []byte
	var err error
	if strings.HasSuffix(meta, ";base64") {
		b, err = base64.StdEncoding.DecodeString(payload)
		if err != nil {
			b, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(payload, "="))
		}
	} else {
		var s string
		s, err = url.PathUnescape(payload)
		b = []byte(s)
	}
	if err != nil {
		return nil, &mediaError{fmt.Sprintf("invalid data: URL in image_url: %v", err)}
	}
	if int64(len(b)) > f.maxBytes {
		return nil, &mediaError{fmt.Sprintf("data: URL in image_url is over the limit of %d bytes", f.maxBytes)}
	}
	if len(b) == 0 {
		return nil, &mediaError{"data: URL in image_url is empty"}
	}
	return b, nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func shorten(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}
