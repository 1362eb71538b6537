package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// DefaultHTTPTimeout bounds one HTTP fetch when HTTP.Timeout is zero.
const DefaultHTTPTimeout = 10 * time.Second

// HTTP is a Remote that polls a document at a URL with GET. After a response with an ETag it
// sends If-None-Match, so an unchanged document costs a 304 and no body.
//
// Fetch returns: on 200, the body (an error beyond MaxSize); on 304, unchanged; on 404 and 410,
// an error wrapping ErrNoConfig; on any other status or a network error, an error.
//
// Set the fields before the first Fetch and do not change them after.
type HTTP struct {
	URL     string
	Header  http.Header   // sent with every request, e.g. Authorization
	Client  *http.Client  // nil: http.DefaultClient
	Timeout time.Duration // bounds each fetch; DefaultHTTPTimeout if zero

	mu   sync.Mutex
	etag string // of the last 200; "" when it had none
}

// Name returns "http " and the URL, without its password.
func (h *HTTP) Name() string { return "http " + h.redacted() }

func (h *HTTP) redacted() string {
	if u, err := url.Parse(h.URL); err == nil {
		return u.Redacted()
	}
	return h.URL
}

// Fetch gets the document; see HTTP.
func (h *HTTP) Fetch(ctx context.Context) ([]byte, bool, error) {
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = DefaultHTTPTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.URL, nil)
	if err != nil {
		return nil, false, fmt.Errorf("config URL %s: %w", h.redacted(), err)
	}
	for k, v := range h.Header {
		req.Header[k] = v
	}
	h.mu.Lock()
	etag := h.etag
	h.mu.Unlock()
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	client := h.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its message repeats the URL
		}
		return nil, false, fmt.Errorf("GET %s: %w", h.redacted(), err)
	}
	defer func() {
		// Drain a little so that the connection can be reused.
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}()

	switch resp.StatusCode {
	case http.StatusOK:
		data, err := io.ReadAll(io.LimitReader(resp.Body, MaxSize+1))
		if err != nil {
			return nil, false, fmt.Errorf("GET %s: read body: %w", h.redacted(), err)
		}
		if len(data) > MaxSize {
			return nil, false, fmt.Errorf("GET %s: document larger than %d bytes (4 MiB)", h.redacted(), MaxSize)
		}
		h.mu.Lock()
		h.etag = resp.Header.Get("ETag")
		h.mu.Unlock()
		return data, true, nil
	case http.StatusNotModified:
		if etag == "" {
			return nil, false, fmt.Errorf("GET %s: 304 Not Modified to a request without If-None-Match", h.redacted())
		}
		return nil, false, nil
	case http.StatusNotFound, http.StatusGone:
		return nil, false, fmt.Errorf("GET %s: %s: %w", h.redacted(), resp.Status, ErrNoConfig)
	default:
		return nil, false, fmt.Errorf("GET %s: unexpected status %s", h.redacted(), resp.Status)
	}
}
