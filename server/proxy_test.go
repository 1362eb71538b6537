package server

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/diana-gw/diana/internal/llmfake"
)

// closedBody is a request body that fails once read to its end, as a client's body that net/http
// closed does: the server closes it as the response's header is written, which may come before
// the transport's last read of it when the upstream answers at once.
type closedBody struct{ *strings.Reader }

func (b closedBody) Read(p []byte) (int, error) {
	if b.Len() == 0 {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.Reader.Read(p)
}

func (closedBody) Close() error { return nil }

// TestProxyClosedBody: the proxy never reads a request body past its Content-Length, so a
// stream reaches the client whole though the client's body was closed under the transport (the
// transport closed the upstream connection on that read's error: 1 to 10% of the streams of an
// upstream answering at once were cut, TestOfficialClients's among them).
func TestProxyClosedBody(t *testing.T) {
	up := httptest.NewServer(llmfake.Handler())
	defer up.Close()
	u, _ := url.Parse(up.URL)
	rp := &httputil.ReverseProxy{Rewrite: Rewrite(u), Transport: NewTransport(), BufferPool: BufferPool()}
	body := `{"max_tokens":20,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	req := httptest.NewRequest("POST", llmfake.Path, closedBody{strings.NewReader(body)})
	req.ContentLength = int64(len(body))
	req.Header.Set("X-Fake-Pad", "1000") // a stream longer than the transport's buffer
	w := httptest.NewRecorder()
	rp.ServeHTTP(w, req)
	if w.Code != http.StatusOK || !strings.HasSuffix(w.Body.String(), "data: [DONE]\n\n") {
		t.Fatalf("status %d, %d bytes ending %q", w.Code, w.Body.Len(), w.Body.String()[max(0, w.Body.Len()-60):])
	}
}
