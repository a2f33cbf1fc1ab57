// Package hubtest is an in-process fake of the Hugging Face Hub's upload
// API for tests: repositories with branches of immutable commits, the
// preupload endpoint, the Git LFS batch API with basic and multipart
// transfers, and NDJSON commits. It checks the protocol strictly (headers,
// payload shapes, credentials where the Hub wants them and none where a
// storage service would reject them, hashes and sizes) and answers a
// violation with an error status, so a client that passes against it
// speaks the protocol. Fault injects failures: an error status, a dropped
// connection, or a request carried out whose answer is lost.
package hubtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
)

// FaultKind is what Fault does to a request.
type FaultKind int

const (
	// None handles the request normally.
	None FaultKind = iota
	// Status500 answers 500 without doing anything.
	Status500
	// Drop closes the connection without doing anything or answering.
	Drop
	// LoseAnswer does what the request asks, then closes the connection
	// without answering: the client cannot know it succeeded.
	LoseAnswer
)

// Server is a fake Hub. Set its fields before the first request.
type Server struct {
	*httptest.Server
	// Token is the only credential accepted; User owns it and may create
	// repositories under User and Orgs.
	Token, User string
	Orgs        []string
	// LFSThreshold: files at least this large, or whose sample holds a NUL
	// byte, go to LFS (the Hub uses 10 MB). MultipartThreshold: objects at
	// least this large upload in parts of ChunkSize.
	LFSThreshold, MultipartThreshold, ChunkSize int64
	// HrefBase, when set, replaces the server's URL in the hrefs the LFS
	// batch API returns (a mirror handing out the public Hub's URLs).
	HrefBase string
	// Fault is consulted for every request (nil: none).
	Fault func(r *http.Request) FaultKind

	mu        sync.Mutex
	repos     map[string]*repo
	objects   map[string][]byte
	sizes     map[string]int64 // oid → size announced in a batch request
	parts     map[string]map[int][]byte
	requests  []string
	commitSeq int
}

type repo struct {
	private  bool
	branches map[string]string
	commits  map[string]*commit
}

type commit struct {
	parent, summary string
	tree            map[string]entry
}

type entry struct {
	lfs  bool
	oid  string
	data []byte
}

// New starts a fake Hub with token and user and small thresholds (LFS from
// 1 KiB, multipart from 64 KiB in 16 KiB parts). Close it when done.
func New(token, user string) *Server {
	s := &Server{Token: token, User: user, LFSThreshold: 1 << 10, MultipartThreshold: 64 << 10, ChunkSize: 16 << 10,
		repos: map[string]*repo{}, objects: map[string][]byte{}, sizes: map[string]int64{}, parts: map[string]map[int][]byte{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/whoami-v2", s.whoami)
	mux.HandleFunc("GET /api/models/{owner}/{name}/revision/{rev}", s.revision)
	mux.HandleFunc("POST /api/repos/create", s.createRepo)
	mux.HandleFunc("POST /api/models/{owner}/{name}/branch/{rev}", s.createBranch)
	mux.HandleFunc("POST /api/models/{owner}/{name}/preupload/{rev}", s.preupload)
	mux.HandleFunc("POST /api/models/{owner}/{name}/commit/{rev}", s.commit)
	mux.HandleFunc("POST /{owner}/{repo}/info/lfs/objects/batch", s.batch)
	mux.HandleFunc("PUT /lfs/basic/{oid}", s.putBasic)
	mux.HandleFunc("PUT /lfs/part/{oid}/{n}", s.putPart)
	mux.HandleFunc("POST /lfs/complete/{oid}", s.complete)
	mux.HandleFunc("POST /lfs/verify", s.verify)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r.Method+" "+r.URL.Path)
		fault := s.Fault
		s.mu.Unlock()
		kind := None
		if fault != nil {
			kind = fault(r)
		}
		switch kind {
		case Status500:
			http.Error(w, `{"error":"injected failure"}`, http.StatusInternalServerError)
		case Drop:
			dropConn(w)
		case LoseAnswer:
			mux.ServeHTTP(httptest.NewRecorder(), r)
			dropConn(w)
		default:
			mux.ServeHTTP(w, r)
		}
	}))
	return s
}

func dropConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	conn.Close()
}

// Requests returns "METHOD path" of every request so far.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// AddRepo makes a repository whose main branch holds files (as regular
// files), as if pushed earlier.
func (s *Server) AddRepo(id string, private bool, files map[string][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.newRepo(id, private)
	s.mu.Unlock()
	s.AddRepoCommit(id, "main", files)
	s.mu.Lock()
}

// AddRepoCommit commits files (as regular files) to an existing branch,
// as another client would.
func (s *Server) AddRepoCommit(id, branch string, files map[string][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[id]
	c := &commit{parent: r.branches[branch], summary: "other", tree: maps.Clone(r.commits[r.branches[branch]].tree)}
	for p, b := range files {
		c.tree[p] = entry{oid: gitOID(b), data: b}
	}
	r.branches[branch] = s.addCommit(r, c)
}

// Files returns the files of repo at branch, or nil when either is missing.
func (s *Server) Files(id, branch string) map[string][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[id]
	if r == nil || r.branches[branch] == "" {
		return nil
	}
	out := map[string][]byte{}
	for p, e := range r.commits[r.branches[branch]].tree {
		out[p] = e.data
	}
	return out
}

// Head returns the sha of branch's head ("" if missing) and how many
// commits lead to it.
func (s *Server) Head(id, branch string) (sha string, depth int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[id]
	if r == nil {
		return "", 0
	}
	sha = r.branches[branch]
	for c := sha; c != ""; c = r.commits[c].parent {
		depth++
	}
	return sha, depth
}

// Private reports whether repo was made private.
func (s *Server) Private(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.repos[id] != nil && s.repos[id].private
}

// Stored reports whether the LFS store holds an object.
func (s *Server) Stored(oid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.objects[oid]
	return ok
}

func (s *Server) newRepo(id string, private bool) *repo {
	r := &repo{private: private, branches: map[string]string{}, commits: map[string]*commit{}}
	s.repos[id] = r
	attrs := []byte("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
	r.branches["main"] = s.addCommit(r, &commit{summary: "initial commit",
		tree: map[string]entry{".gitattributes": {oid: gitOID(attrs), data: attrs}}})
	return r
}

func (s *Server) addCommit(r *repo, c *commit) string {
	s.commitSeq++
	h := sha1.Sum(fmt.Appendf(nil, "%s %d %s", c.parent, s.commitSeq, c.summary))
	sha := hex.EncodeToString(h[:])
	r.commits[sha] = c
	return sha
}

func gitOID(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// fail answers an error the way the Hub does: a JSON body, and the
// X-Error-Code header for missing repositories and revisions.
func fail(w http.ResponseWriter, status int, code, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// authed checks the bearer token, answering 401 when it is wrong.
func (s *Server) authed(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get("Authorization") != "Bearer "+s.Token {
		fail(w, http.StatusUnauthorized, "", "Invalid credentials in Authorization header")
		return false
	}
	return true
}

// lookup finds the repository and branch of a request, answering the
// Hub's 404s. Called with s.mu held.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request) (*repo, string, bool) {
	id := r.PathValue("owner") + "/" + r.PathValue("name")
	rp := s.repos[id]
	if rp == nil {
		fail(w, http.StatusNotFound, "RepoNotFound", "Repository not found")
		return nil, "", false
	}
	rev := r.PathValue("rev")
	if rp.branches[rev] == "" {
		fail(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: %s", rev)
		return nil, "", false
	}
	return rp, rev, true
}

// decode reads a JSON body with the wanted content type into v.
func decode(w http.ResponseWriter, r *http.Request, contentType string, v any) bool {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, contentType) {
		fail(w, http.StatusBadRequest, "", "Content-Type %q: want %s", ct, contentType)
		return false
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		fail(w, http.StatusBadRequest, "", "bad JSON body: %v", err)
		return false
	}
	return true
}

func (s *Server) whoami(w http.ResponseWriter, r *http.Request) {
	if s.authed(w, r) {
		reply(w, map[string]any{"type": "user", "name": s.User})
	}
}

func (s *Server) revision(w http.ResponseWriter, r *http.Request) {
	if !s.authed(w, r) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rp, rev, ok := s.lookup(w, r)
	if !ok {
		return
	}
	sha := rp.branches[rev]
	var sib []map[string]string
	for _, p := range slices.Sorted(maps.Keys(rp.commits[sha].tree)) {
		sib = append(sib, map[string]string{"rfilename": p})
	}
	reply(w, map[string]any{"id": r.PathValue("owner") + "/" + r.PathValue("name"), "sha": sha,
		"private": rp.private, "siblings": sib})
}

func (s *Server) createRepo(w http.ResponseWriter, r *http.Request) {
	if !s.authed(w, r) {
		return
	}
	var req struct {
		Name         string `json:"name"`
		Organization string `json:"organization"`
		Private      *bool  `json:"private"`
		Type         string `json:"type"`
	}
	if !decode(w, r, "application/json", &req) {
		return
	}
	if req.Name == "" || (req.Type != "" && req.Type != "model") {
		fail(w, http.StatusBadRequest, "", "bad name %q or type %q", req.Name, req.Type)
		return
	}
	owner := req.Organization
	if owner == "" {
		owner = s.User
	}
	if owner != s.User && !slices.Contains(s.Orgs, owner) {
		fail(w, http.StatusForbidden, "", "You don't have the rights to create a model under the namespace %q", owner)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := owner + "/" + req.Name
	if s.repos[id] != nil {
		fail(w, http.StatusConflict, "", "You already created this model repo")
		return
	}
	s.newRepo(id, req.Private != nil && *req.Private)
	reply(w, map[string]string{"url": s.URL + "/" + id, "name": id})
}

func (s *Server) createBranch(w http.ResponseWriter, r *http.Request) {
	if !s.authed(w, r) {
		return
	}
	var req struct {
		StartingPoint string `json:"startingPoint"`
	}
	if !decode(w, r, "application/json", &req) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rp := s.repos[r.PathValue("owner")+"/"+r.PathValue("name")]
	if rp == nil {
		fail(w, http.StatusNotFound, "RepoNotFound", "Repository not found")
		return
	}
	if rp.branches[r.PathValue("rev")] != "" {
		fail(w, http.StatusConflict, "", "Reference already exists")
		return
	}
	rp.branches[r.PathValue("rev")] = rp.branches["main"]
	reply(w, map[string]any{})
}
