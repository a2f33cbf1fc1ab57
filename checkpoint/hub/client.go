package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// DefaultEndpoint is the public Hub.
const DefaultEndpoint = "https://huggingface.co"

// EndpointFromEnv is HF_ENDPOINT (a mirror), else DefaultEndpoint.
func EndpointFromEnv() string {
	if e := strings.TrimRight(os.Getenv("HF_ENDPOINT"), "/"); e != "" {
		return e
	}
	return DefaultEndpoint
}

// Client talks to one Hub endpoint with one token. Its zero value is not
// usable; make one with NewClient.
type Client struct {
	// Endpoint is the Hub's base URL, without a trailing slash.
	Endpoint string
	// Token authenticates every request; TokenSource says where it came
	// from, for error messages.
	Token, TokenSource string
	// HTTP sends the requests (http.DefaultClient when nil).
	HTTP *http.Client
	// UserAgent identifies lowbit to the Hub.
	UserAgent string
	// MaxAttempts bounds the tries of a request that failed on the network
	// or with a 408, 429 or 5xx (huggingface_hub's http_backoff list);
	// Backoff is the wait before the second try, doubled after each, at
	// most MaxBackoff.
	MaxAttempts         int
	Backoff, MaxBackoff time.Duration
}

// NewClient returns a Client for endpoint ("" is EndpointFromEnv) with the
// retry policy huggingface_hub uses for uploads.
func NewClient(endpoint, token, tokenSource string) (*Client, error) {
	if endpoint == "" {
		endpoint = EndpointFromEnv()
	}
	endpoint = strings.TrimRight(endpoint, "/")
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("hub: endpoint %q: want an http or https URL such as %s", endpoint, DefaultEndpoint)
	}
	return &Client{Endpoint: endpoint, Token: token, TokenSource: tokenSource, UserAgent: "lowbit",
		MaxAttempts: 5, Backoff: time.Second, MaxBackoff: 16 * time.Second}, nil
}

// Error is a request the Hub answered with an error status.
type Error struct {
	// Op is what lowbit was doing ("read meta-llama/x at main").
	Op     string
	URL    string
	Status int
	// Code and Message are the Hub's X-Error-Code and X-Error-Message
	// headers, or the message of the body's "error" field.
	Code, Message string
	// Hint says what to do about it.
	Hint string
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("hub: %s: HTTP %d", e.Op, e.Status)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg
}

// notFound reports whether err is the Hub saying that the repository (code
// "RepoNotFound", or a 401 on a repository URL, which the Hub answers for
// private and missing repositories alike) or the revision ("RevisionNotFound")
// does not exist.
func notFound(err error, code string) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	if code == "RepoNotFound" && e.Status == http.StatusUnauthorized && !invalidToken(e) {
		return true
	}
	return e.Code == code
}

func invalidToken(e *Error) bool {
	return e.Status == http.StatusUnauthorized && strings.Contains(e.Message, "Invalid credentials")
}

// request is one API call. body, when set, makes a fresh reader for each
// attempt.
type request struct {
	op, method, url string
	header          http.Header
	body            func() (io.Reader, error)
	// auth sends the token; false for presigned storage URLs, which a
	// second credential would invalidate.
	auth bool
	// retry allows retries; only for requests that are safe to repeat.
	retry bool
	// onFail, when set, is called after a failed attempt (to rewind
	// progress counted while the body was read).
	onFail func()
}

// do sends r, retrying transient failures, and returns the response of a
// 2xx answer with its body open. Other answers become an *Error.
func (c *Client) do(ctx context.Context, r request) (*http.Response, error) {
	attempts := 1
	if r.retry && c.MaxAttempts > 1 {
		attempts = c.MaxAttempts
	}
	wait := c.Backoff
	for i := 1; ; i++ {
		resp, err := c.send(ctx, r)
		if err == nil && resp.StatusCode/100 == 2 {
			return resp, nil
		}
		if r.onFail != nil {
			r.onFail()
		}
		var herr *Error
		if err == nil {
			herr = c.decodeError(r, resp)
			err = herr
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if i >= attempts || !transient(herr) {
			if herr == nil {
				host := r.url
				if u, perr := url.Parse(r.url); perr == nil {
					host = u.Scheme + "://" + u.Host
				}
				return nil, fmt.Errorf("hub: %s: cannot reach %s (%d attempts): %w; check the network, "+
					"or point --endpoint (or HF_ENDPOINT) at a Hub mirror you can reach", r.op, host, i, err)
			}
			return nil, herr
		}
		d := wait
		if herr != nil && herr.Status == http.StatusTooManyRequests {
			if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
				d = time.Duration(s) * time.Second
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(d):
		}
		if wait *= 2; c.MaxBackoff > 0 && wait > c.MaxBackoff {
			wait = c.MaxBackoff
		}
	}
}

// transient reports whether a failed attempt is worth repeating: a network
// error (nil *Error) or a 408, 429 or 5xx answer.
func transient(e *Error) bool {
	if e == nil {
		return true
	}
	return e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests || e.Status >= 500
}

func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	var body io.Reader
	if r.body != nil {
		var err error
		if body, err = r.body(); err != nil {
			return nil, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, r.method, r.url, body)
	if err != nil {
		return nil, err
	}
	if sized, ok := body.(interface{ Size() int64 }); ok {
		// A section of a file: say its length, as storage services want
		// a Content-Length rather than a chunked body.
		req.ContentLength = sized.Size()
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	if r.auth && c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	return hc.Do(req)
}

// decodeError reads an error answer and closes its body.
func (c *Client) decodeError(r request, resp *http.Response) *Error {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<10))
	e := &Error{Op: r.op, URL: r.url, Status: resp.StatusCode,
		Code: resp.Header.Get("X-Error-Code"), Message: resp.Header.Get("X-Error-Message")}
	if e.Message == "" {
		var body struct {
			Error any `json:"error"`
		}
		if json.Unmarshal(b, &body) == nil && body.Error != nil {
			if s, ok := body.Error.(string); ok {
				e.Message = s
			} else if m, ok := body.Error.(map[string]any); ok {
				e.Message, _ = m["message"].(string)
			}
		}
		if e.Message == "" {
			e.Message = strings.TrimSpace(string(bytes.ToValidUTF8(b, nil)))
			if len(e.Message) > 300 {
				e.Message = e.Message[:300] + "..."
			}
		}
	}
	switch {
	case invalidToken(e):
		e.Hint = fmt.Sprintf("the Hub refused the token from %s: it may be mistyped, revoked or expired; "+
			"make one at %s/settings/tokens and set HF_TOKEN, or run `hf auth login`", c.tokenSource(), DefaultEndpoint)
	case e.Status == http.StatusForbidden:
		e.Hint = fmt.Sprintf("the token from %s may lack write access: use a token with the write role, "+
			"or a fine-grained one allowed to write to this repository or its namespace", c.tokenSource())
	case e.Status == http.StatusTooManyRequests:
		e.Hint = "the Hub is rate limiting this token: wait a few minutes and push again (uploaded files are kept)"
	case e.Status >= 500:
		e.Hint = "the Hub failed: push again later (uploaded files are kept)"
	}
	return e
}

func (c *Client) tokenSource() string {
	if c.TokenSource == "" {
		return "the command line"
	}
	return c.TokenSource
}

// json sends r and decodes a 2xx answer's JSON body into out.
func (c *Client) json(ctx context.Context, r request, out any) error {
	resp, err := c.do(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("hub: %s: reading the answer: %w", r.op, err)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("hub: %s: the Hub's answer is not the JSON expected (%v): %.200q", r.op, err, b)
	}
	return nil
}

// jsonBody is a request body factory for v encoded as JSON.
func jsonBody(v any) (func() (io.Reader, error), error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return func() (io.Reader, error) { return bytes.NewReader(b), nil }, nil
}

// apiURL is the Hub API URL of path segments under Endpoint; each segment
// is escaped, so a revision "refs/pr/1" stays one segment.
func (c *Client) apiURL(segments ...string) string {
	var sb strings.Builder
	sb.WriteString(c.Endpoint)
	for _, s := range segments {
		sb.WriteByte('/')
		sb.WriteString(s)
	}
	return sb.String()
}

// fixURL points a URL the Hub returned at the mirror in use: a mirror can
// hand out URLs on the public Hub's host.
func (c *Client) fixURL(u string) string {
	if c.Endpoint != DefaultEndpoint && strings.HasPrefix(u, DefaultEndpoint+"/") {
		return c.Endpoint + strings.TrimPrefix(u, DefaultEndpoint)
	}
	return u
}
