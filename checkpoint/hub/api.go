package hub

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

// RepoID names a model repository: OWNER/NAME.
type RepoID struct{ Owner, Name string }

func (r RepoID) String() string { return r.Owner + "/" + r.Name }

// repoPart is what the Hub accepts in a namespace or a repository name.
var repoPart = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$`)

// ParseRepoID parses OWNER/NAME with the Hub's rules for names.
func ParseRepoID(s string) (RepoID, error) {
	owner, name, ok := strings.Cut(s, "/")
	bad := func(why string) (RepoID, error) {
		return RepoID{}, fmt.Errorf("hub: repository %q: %s; want OWNER/NAME, such as my-org/Qwen3-8B-FP8", s, why)
	}
	switch {
	case !ok || owner == "" || name == "":
		return bad("not OWNER/NAME")
	case strings.Contains(name, "/"):
		return bad("more than one /")
	case !repoPart.MatchString(owner) || !repoPart.MatchString(name):
		return bad("letters, digits, '-', '_' and '.' only, at most 96 each, starting with a letter or digit")
	case strings.Contains(s, "--") || strings.Contains(s, ".."):
		return bad("'--' and '..' are not allowed")
	case strings.HasSuffix(name, ".git") || strings.HasSuffix(name, "."):
		return bad("a name may not end in .git or .")
	}
	return RepoID{owner, name}, nil
}

// revisionInfo is the part of GET /api/models/{repo}/revision/{rev} a push
// reads.
type revisionInfo struct {
	SHA      string `json:"sha"`
	Private  bool   `json:"private"`
	Siblings []struct {
		RFilename string `json:"rfilename"`
	} `json:"siblings"`
}

func (c *Client) revision(ctx context.Context, repo RepoID, rev string) (*revisionInfo, error) {
	var info revisionInfo
	err := c.json(ctx, request{op: fmt.Sprintf("read %s at %s", repo, rev), method: http.MethodGet,
		url: c.apiURL("api/models", repo.Owner, repo.Name, "revision", url.PathEscape(rev)), auth: true, retry: true}, &info)
	if err != nil {
		return nil, err
	}
	if !isHex(info.SHA, 40) {
		return nil, fmt.Errorf("hub: read %s at %s: the Hub gave no commit sha (%q)", repo, rev, info.SHA)
	}
	return &info, nil
}

// whoami returns the token's user name; it makes a refused token a clear
// error before any work.
func (c *Client) whoami(ctx context.Context) (string, error) {
	var who struct {
		Name string `json:"name"`
	}
	err := c.json(ctx, request{op: "check the token", method: http.MethodGet,
		url: c.apiURL("api/whoami-v2"), auth: true, retry: true}, &who)
	return who.Name, err
}

// createRepo makes a model repository; one that exists already is not an
// error (a retried request may have made it).
func (c *Client) createRepo(ctx context.Context, repo RepoID, private bool) error {
	// "private" is the field every huggingface_hub release until 2026 sent
	// (newer ones send "visibility"); mirrors understand it.
	body, err := jsonBody(map[string]any{"name": repo.Name, "organization": repo.Owner, "private": private})
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, request{op: "create " + repo.String(), method: http.MethodPost,
		url: c.apiURL("api/repos/create"), header: http.Header{"Content-Type": {"application/json"}},
		body: body, auth: true, retry: true})
	var e *Error
	if errors.As(err, &e) && e.Status == http.StatusConflict {
		return nil
	}
	if err != nil {
		if errors.As(err, &e) && (e.Status == http.StatusForbidden || e.Status == http.StatusUnauthorized) && !invalidToken(e) {
			e.Hint = fmt.Sprintf("%s does not exist and the token from %s may not create repositories in %q: "+
				"create it at %s/new, or check the owner's spelling and the token's write access",
				repo, c.tokenSource(), repo.Owner, DefaultEndpoint)
		}
		return err
	}
	resp.Body.Close()
	return nil
}

// createBranch makes branch from the default branch's head.
func (c *Client) createBranch(ctx context.Context, repo RepoID, branch string) error {
	body, _ := jsonBody(map[string]any{})
	resp, err := c.do(ctx, request{op: fmt.Sprintf("create branch %s of %s", branch, repo), method: http.MethodPost,
		url:    c.apiURL("api/models", repo.Owner, repo.Name, "branch", url.PathEscape(branch)),
		header: http.Header{"Content-Type": {"application/json"}}, body: body, auth: true, retry: true})
	var e *Error
	if errors.As(err, &e) && e.Status == http.StatusConflict {
		return nil
	}
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// preuploadFile describes a file to the preupload endpoint.
type preuploadFile struct {
	Path   string `json:"path"`
	Sample string `json:"sample"` // base64 of the first 512 bytes
	Size   int64  `json:"size"`
}

func encodeSample(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// preuploadResult is the Hub's answer for one file.
type preuploadResult struct {
	Path         string  `json:"path"`
	UploadMode   string  `json:"uploadMode"` // "regular" or "lfs"
	ShouldIgnore bool    `json:"shouldIgnore"`
	OID          *string `json:"oid"` // the file's oid on the branch now, if it exists
}

// preuploadChunk is how many files one preupload request describes, as
// huggingface_hub sends them.
const preuploadChunk = 256

// preupload asks how each file is to be uploaded.
func (c *Client) preupload(ctx context.Context, repo RepoID, rev string, files []preuploadFile) (map[string]preuploadResult, error) {
	out := make(map[string]preuploadResult, len(files))
	for len(files) > 0 {
		n := min(len(files), preuploadChunk)
		body, err := jsonBody(map[string]any{"files": files[:n]})
		if err != nil {
			return nil, err
		}
		var ans struct {
			Files []preuploadResult `json:"files"`
		}
		op := fmt.Sprintf("ask %s how to upload %d files", repo, n)
		err = c.json(ctx, request{op: op, method: http.MethodPost,
			url:    c.apiURL("api/models", repo.Owner, repo.Name, "preupload", url.PathEscape(rev)),
			header: http.Header{"Content-Type": {"application/json"}}, body: body, auth: true, retry: true}, &ans)
		if err != nil {
			return nil, err
		}
		for _, f := range ans.Files {
			if f.UploadMode != "regular" && f.UploadMode != "lfs" {
				return nil, fmt.Errorf("hub: %s: upload mode %q for %s: want regular or lfs", op, f.UploadMode, f.Path)
			}
			out[f.Path] = f
		}
		for _, f := range files[:n] {
			if _, ok := out[f.Path]; !ok {
				return nil, fmt.Errorf("hub: %s: the Hub said nothing about %s", op, f.Path)
			}
		}
		files = files[n:]
	}
	return out, nil
}

// commitOp is one line of a commit after its header.
type commitOp struct {
	Key   string // "file", "lfsFile" or "deletedFile"
	Value any
}

type commitHeader struct {
	Summary      string `json:"summary"`
	Description  string `json:"description"`
	ParentCommit string `json:"parentCommit,omitempty"`
}

type regularFile struct {
	Content  string `json:"content"`
	Path     string `json:"path"`
	Encoding string `json:"encoding"`
}

type lfsFile struct {
	Path string `json:"path"`
	Algo string `json:"algo"`
	OID  string `json:"oid"`
	Size int64  `json:"size"`
}

type deletedFile struct {
	Path string `json:"path"`
}

func newRegularOp(path string, content []byte) commitOp {
	return commitOp{"file", regularFile{base64.StdEncoding.EncodeToString(content), path, "base64"}}
}

// commitResult is the Hub's answer to a commit.
type commitResult struct {
	CommitOID string `json:"commitOid"`
	CommitURL string `json:"commitUrl"`
}

// commit sends one commit. It is sent once: a lost answer is for the
// caller to resolve (see Push), since repeating a commit that succeeded
// would fail on its parent or, without one, commit twice.
func (c *Client) commit(ctx context.Context, repo RepoID, rev string, h commitHeader, ops []commitOp) (*commitResult, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if err := enc.Encode(map[string]any{"key": "header", "value": h}); err != nil {
		return nil, err
	}
	for _, op := range ops {
		if err := enc.Encode(map[string]any{"key": op.Key, "value": op.Value}); err != nil {
			return nil, err
		}
	}
	b := buf.Bytes()
	var res commitResult
	err := c.json(ctx, request{op: fmt.Sprintf("commit to %s at %s", repo, rev), method: http.MethodPost,
		url:    c.apiURL("api/models", repo.Owner, repo.Name, "commit", url.PathEscape(rev)),
		header: http.Header{"Content-Type": {"application/x-ndjson"}},
		body:   func() (io.Reader, error) { return bytes.NewReader(b), nil }, auth: true}, &res)
	if err != nil {
		return nil, err
	}
	if !isHex(res.CommitOID, 40) {
		return nil, fmt.Errorf("hub: commit to %s at %s: the Hub gave no commit sha (%q)", repo, rev, res.CommitOID)
	}
	return &res, nil
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
