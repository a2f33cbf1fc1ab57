package bench

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// BenchmarkClientStream measures what the client spends on each streamed
// message (SSE parsing, JSON decoding, timestamps) against reading the
// same bytes raw from the same local server: the difference bounds how
// much the client adds to ITL and how fast a server it can measure.
func BenchmarkClientStream(b *testing.B) {
	const messages = 1024
	var sb strings.Builder
	for i := range messages {
		sb.WriteString(chunkEvent(false, i == 0, " token"))
	}
	sb.WriteString(`data: {"id":"x","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":1024,"total_tokens":1031}}` + "\n\ndata: [DONE]\n\n")
	stream := sb.String()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, stream)
	}))
	defer srv.Close()
	b.Run("raw read", func(b *testing.B) {
		for b.Loop() {
			resp, err := srv.Client().Post(srv.URL+"/v1/completions", "application/json", strings.NewReader("{}"))
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*messages), "ns/message")
	})
	b.Run("bench client", func(b *testing.B) {
		c := &client{http: srv.Client(), base: srv.URL, model: "m", tok: qwenTok(b)}
		for b.Loop() {
			rec := c.send(context.Background(), RequestSpec{Endpoint: Completions, Prompt: "p", MaxTokens: messages}, nil, true, time.Now())
			if !rec.Success || len(rec.ITL) != messages-1 {
				b.Fatalf("%+v", rec.Error)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*messages), "ns/message")
	})
}
