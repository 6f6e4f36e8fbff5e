package gateway

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func TestPprofListenerServesProfilesOnItsOwnAddress(t *testing.T) {
	p, err := startPprof("127.0.0.1:0", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	for _, tc := range []struct {
		path, want string
	}{
		{"/debug/pprof/", "goroutine"},
		{"/debug/pprof/cmdline", ""},
		{"/debug/pprof/goroutine?debug=1", "goroutine profile"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			resp, err := http.Get("http://" + p.addr.String() + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), tc.want) {
				t.Fatalf("GET %s: %d, %d bytes (err %v); want 200 containing %q", tc.path, resp.StatusCode, len(body), err, tc.want)
			}
		})
	}
}
