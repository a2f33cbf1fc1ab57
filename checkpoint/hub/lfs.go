package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
)

// lfsHeaders are the media types of the Git LFS batch API.
var lfsHeaders = http.Header{
	"Accept":       {"application/vnd.git-lfs+json"},
	"Content-Type": {"application/vnd.git-lfs+json"},
}

type lfsObject struct {
	OID  string `json:"oid"`
	Size int64  `json:"size"`
}

// lfsAction is an upload or verify action. Header is raw because the
// Hub's multipart action puts a number (chunk_size) and part URLs there.
type lfsAction struct {
	Href   string                     `json:"href"`
	Header map[string]json.RawMessage `json:"header"`
}

// batchObject is the batch API's answer for one object: actions to take,
// none (the Hub has it already), or an error.
type batchObject struct {
	OID     string `json:"oid"`
	Size    int64  `json:"size"`
	Actions *struct {
		Upload *lfsAction `json:"upload"`
		Verify *lfsAction `json:"verify"`
	} `json:"actions"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// parseBatchResponse decodes and validates a batch answer.
func parseBatchResponse(b []byte) ([]batchObject, error) {
	var ans struct {
		Objects *[]batchObject `json:"objects"`
	}
	if err := json.Unmarshal(b, &ans); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if ans.Objects == nil {
		return nil, fmt.Errorf("no objects list")
	}
	for _, o := range *ans.Objects {
		if !isHex(o.OID, 64) {
			return nil, fmt.Errorf("object oid %q is not a sha256", o.OID)
		}
		if o.Size < 0 {
			return nil, fmt.Errorf("object %s: size %d", o.OID, o.Size)
		}
		if o.Actions == nil {
			continue
		}
		for _, a := range []*lfsAction{o.Actions.Upload, o.Actions.Verify} {
			if a != nil && a.Href == "" {
				return nil, fmt.Errorf("object %s: an action without href", o.OID)
			}
		}
		if o.Actions.Upload != nil {
			if _, _, err := multipartPlan(o.Actions.Upload, o.Size); err != nil {
				return nil, fmt.Errorf("object %s: %w", o.OID, err)
			}
		}
	}
	return *ans.Objects, nil
}

// multipartPlan returns the part URLs and part size of a multipart upload
// action, or nil URLs for a basic one (no chunk_size).
func multipartPlan(a *lfsAction, size int64) (urls []string, chunk int64, err error) {
	raw, ok := a.Header["chunk_size"]
	if !ok {
		return nil, 0, nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		s = string(raw) // a JSON number
	}
	chunk, err = strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || chunk <= 0 {
		return nil, 0, fmt.Errorf("multipart chunk_size %s is not a positive integer", raw)
	}
	type part struct {
		n   int
		url string
	}
	var parts []part
	for k, v := range a.Header {
		n, err := strconv.Atoi(k)
		if err != nil || n <= 0 || strconv.Itoa(n) != k {
			continue
		}
		var u string
		if err := json.Unmarshal(v, &u); err != nil || u == "" {
			return nil, 0, fmt.Errorf("multipart part %s: the URL is not a string", k)
		}
		parts = append(parts, part{n, u})
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].n < parts[j].n })
	want := (size + chunk - 1) / chunk
	if int64(len(parts)) != want {
		return nil, 0, fmt.Errorf("multipart: %d part URLs for %d bytes in parts of %d (want %d)", len(parts), size, chunk, want)
	}
	for i, p := range parts {
		if p.n != i+1 {
			return nil, 0, fmt.Errorf("multipart: part %d is missing", i+1)
		}
		urls = append(urls, p.url)
	}
	return urls, chunk, nil
}

// lfsBatch asks where to upload objs, chunk by chunk.
func (c *Client) lfsBatch(ctx context.Context, repo RepoID, rev string, objs []lfsObject) (map[string]batchObject, error) {
	out := make(map[string]batchObject, len(objs))
	for len(objs) > 0 {
		n := min(len(objs), preuploadChunk)
		body, err := jsonBody(map[string]any{
			"operation": "upload",
			"transfers": []string{"basic", "multipart"},
			"objects":   objs[:n],
			"hash_algo": "sha256",
			"ref":       map[string]string{"name": rev},
		})
		if err != nil {
			return nil, err
		}
		op := fmt.Sprintf("ask %s where to upload %d large files", repo, n)
		resp, err := c.do(ctx, request{op: op, method: http.MethodPost,
			url:    c.Endpoint + "/" + repo.Owner + "/" + repo.Name + ".git/info/lfs/objects/batch",
			header: lfsHeaders.Clone(), body: body, auth: true, retry: true})
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("hub: %s: reading the answer: %w", op, err)
		}
		got, err := parseBatchResponse(b)
		if err != nil {
			return nil, fmt.Errorf("hub: %s: malformed answer: %w", op, err)
		}
		for _, o := range got {
			if o.Error != nil {
				return nil, fmt.Errorf("hub: %s: object %s: %d %s", op, o.OID, o.Error.Code, o.Error.Message)
			}
			out[o.OID] = o
		}
		for _, o := range objs[:n] {
			if _, ok := out[o.OID]; !ok {
				return nil, fmt.Errorf("hub: %s: the Hub said nothing about object %s", op, o.OID)
			}
		}
		objs = objs[n:]
	}
	return out, nil
}

// counter counts bytes sent, for a progress bar; rewind takes back what a
// failed attempt had counted.
type counter struct {
	total atomic.Int64
	add   func(int64) // may be nil
}

func (c *counter) count(n int64) {
	c.total.Add(n)
	if c.add != nil {
		c.add(n)
	}
}

// countingSection reads a section of a file and counts what it read.
type countingSection struct {
	*io.SectionReader
	c    *counter
	read int64
}

func (s *countingSection) Read(p []byte) (int, error) {
	n, err := s.SectionReader.Read(p)
	s.read += int64(n)
	s.c.count(int64(n))
	return n, err
}

// section returns a request body factory for bytes [off, off+n) of f, with
// the rewind of a failed attempt.
func section(f *os.File, off, n int64, c *counter) (body func() (io.Reader, error), onFail func()) {
	var cur *countingSection
	body = func() (io.Reader, error) {
		cur = &countingSection{SectionReader: io.NewSectionReader(f, off, n), c: c}
		return cur, nil
	}
	onFail = func() {
		if cur != nil {
			c.count(-cur.read)
			cur.read = 0
		}
	}
	return body, onFail
}

// uploadObject uploads one file's object as the batch answer says (basic or
// multipart), then verifies it if asked to.
func (c *Client) uploadObject(ctx context.Context, lf *localFile, obj batchObject, cnt *counter) error {
	up := obj.Actions.Upload
	f, err := os.Open(lf.Abs)
	if err != nil {
		return fmt.Errorf("hub: upload %s: %w", lf.Path, err)
	}
	defer f.Close()
	urls, chunk, err := multipartPlan(up, lf.Size)
	if err != nil {
		return fmt.Errorf("hub: upload %s: %w", lf.Path, err)
	}
	if urls == nil {
		h := http.Header{}
		for k, v := range up.Header {
			var s string
			if json.Unmarshal(v, &s) == nil {
				h.Set(k, s)
			}
		}
		body, onFail := section(f, 0, lf.Size, cnt)
		resp, err := c.do(ctx, request{op: "upload " + lf.Path, method: http.MethodPut, url: c.fixURL(up.Href),
			header: h, body: body, onFail: onFail, retry: true})
		if err != nil {
			return err
		}
		resp.Body.Close()
	} else {
		type part struct {
			PartNumber int    `json:"partNumber"`
			ETag       string `json:"etag"`
		}
		parts := make([]part, len(urls))
		for i, u := range urls {
			off := int64(i) * chunk
			body, onFail := section(f, off, min(chunk, lf.Size-off), cnt)
			op := fmt.Sprintf("upload part %d/%d of %s", i+1, len(urls), lf.Path)
			resp, err := c.do(ctx, request{op: op, method: http.MethodPut, url: c.fixURL(u),
				body: body, onFail: onFail, retry: true})
			if err != nil {
				return err
			}
			resp.Body.Close()
			etag := resp.Header.Get("ETag")
			if etag == "" {
				return fmt.Errorf("hub: %s: the storage service returned no ETag", op)
			}
			parts[i] = part{i + 1, etag}
		}
		body, err := jsonBody(map[string]any{"oid": lf.SHA256, "parts": parts})
		if err != nil {
			return err
		}
		resp, err := c.do(ctx, request{op: "complete the upload of " + lf.Path, method: http.MethodPost,
			url: c.fixURL(up.Href), header: lfsHeaders.Clone(), body: body, retry: true})
		if err != nil {
			return err
		}
		resp.Body.Close()
	}
	if v := obj.Actions.Verify; v != nil {
		body, err := jsonBody(lfsObject{lf.SHA256, lf.Size})
		if err != nil {
			return err
		}
		resp, err := c.do(ctx, request{op: "verify the upload of " + lf.Path, method: http.MethodPost,
			url: c.fixURL(v.Href), header: lfsHeaders.Clone(), body: body, auth: true, retry: true})
		if err != nil {
			return err
		}
		resp.Body.Close()
	}
	return nil
}
