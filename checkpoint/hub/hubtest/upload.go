package hubtest

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

var oidRe = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (s *Server) preupload(w http.ResponseWriter, r *http.Request) {
	if !s.authed(w, r) {
		return
	}
	var req struct {
		Files []struct {
			Path   string `json:"path"`
			Sample string `json:"sample"`
			Size   *int64 `json:"size"`
		} `json:"files"`
	}
	if !decode(w, r, "application/json", &req) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rp, rev, ok := s.lookup(w, r)
	if !ok {
		return
	}
	tree := rp.commits[rp.branches[rev]].tree
	var out []map[string]any
	for _, f := range req.Files {
		sample, err := base64.StdEncoding.DecodeString(f.Sample)
		switch {
		case f.Path == "" || f.Size == nil || *f.Size < 0:
			fail(w, http.StatusBadRequest, "", "file %q: path and size are required", f.Path)
			return
		case err != nil || int64(len(sample)) != min(*f.Size, 512):
			fail(w, http.StatusBadRequest, "", "file %q: sample must be the base64 of the first min(size, 512) bytes", f.Path)
			return
		}
		mode := "regular"
		if *f.Size > 0 && (*f.Size >= s.LFSThreshold || bytes.IndexByte(sample, 0) >= 0) {
			mode = "lfs"
		}
		var oid any
		if e, ok := tree[f.Path]; ok {
			oid = e.oid
		}
		out = append(out, map[string]any{"path": f.Path, "uploadMode": mode, "shouldIgnore": false, "oid": oid})
	}
	reply(w, map[string]any{"files": out})
}

func (s *Server) batch(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Accept") != "application/vnd.git-lfs+json" {
		fail(w, http.StatusNotAcceptable, "", "Accept %q: want application/vnd.git-lfs+json", r.Header.Get("Accept"))
		return
	}
	if !s.authed(w, r) {
		return
	}
	var req struct {
		Operation string   `json:"operation"`
		Transfers []string `json:"transfers"`
		Objects   []struct {
			OID  string `json:"oid"`
			Size int64  `json:"size"`
		} `json:"objects"`
		HashAlgo string `json:"hash_algo"`
		Ref      struct {
			Name string `json:"name"`
		} `json:"ref"`
	}
	if !decode(w, r, "application/vnd.git-lfs+json", &req) {
		return
	}
	if req.Operation != "upload" || req.HashAlgo != "sha256" || !slicesContain(req.Transfers, "basic") || !slicesContain(req.Transfers, "multipart") {
		fail(w, http.StatusBadRequest, "", "want operation upload, hash_algo sha256, transfers basic and multipart")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	repoName, ok := strings.CutSuffix(r.PathValue("repo"), ".git")
	rp := s.repos[r.PathValue("owner")+"/"+repoName]
	if !ok || rp == nil {
		fail(w, http.StatusNotFound, "RepoNotFound", "Repository not found")
		return
	}
	if rp.branches[req.Ref.Name] == "" {
		fail(w, http.StatusBadRequest, "", "ref %q is not a branch", req.Ref.Name)
		return
	}
	base := s.URL
	if s.HrefBase != "" {
		base = s.HrefBase
	}
	var out []map[string]any
	for _, o := range req.Objects {
		if !oidRe.MatchString(o.OID) || o.Size <= 0 {
			fail(w, http.StatusUnprocessableEntity, "", "object %q size %d: want a sha256 and a positive size", o.OID, o.Size)
			return
		}
		obj := map[string]any{"oid": o.OID, "size": o.Size}
		if _, ok := s.objects[o.OID]; !ok {
			s.sizes[o.OID] = o.Size
			verify := map[string]any{"href": base + "/lfs/verify"}
			if o.Size >= s.MultipartThreshold {
				header := map[string]any{"chunk_size": strconv.FormatInt(s.ChunkSize, 10)}
				for i := int64(1); (i-1)*s.ChunkSize < o.Size; i++ {
					header[strconv.FormatInt(i, 10)] = fmt.Sprintf("%s/lfs/part/%s/%d", base, o.OID, i)
				}
				obj["actions"] = map[string]any{"upload": map[string]any{"href": base + "/lfs/complete/" + o.OID, "header": header}, "verify": verify}
			} else {
				obj["actions"] = map[string]any{"upload": map[string]any{"href": base + "/lfs/basic/" + o.OID}, "verify": verify}
			}
		}
		out = append(out, obj)
	}
	w.Header().Set("Content-Type", "application/vnd.git-lfs+json")
	json.NewEncoder(w).Encode(map[string]any{"transfer": "basic", "objects": out})
}

func slicesContain(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// storage checks what a storage service's presigned URL checks: no second
// credential, and a body of the announced length.
func storage(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.Header.Get("Authorization") != "" {
		fail(w, http.StatusBadRequest, "", "a presigned URL takes no Authorization header")
		return nil, false
	}
	if r.ContentLength < 0 {
		fail(w, http.StatusLengthRequired, "", "Content-Length is required")
		return nil, false
	}
	b, err := io.ReadAll(r.Body)
	if err != nil || int64(len(b)) != r.ContentLength {
		fail(w, http.StatusBadRequest, "", "body shorter than Content-Length")
		return nil, false
	}
	return b, true
}

func (s *Server) putBasic(w http.ResponseWriter, r *http.Request) {
	b, ok := storage(w, r)
	if !ok {
		return
	}
	oid := r.PathValue("oid")
	s.mu.Lock()
	defer s.mu.Unlock()
	if int64(len(b)) != s.sizes[oid] || sha256Hex(b) != oid {
		fail(w, http.StatusBadRequest, "", "content does not match oid %s and its announced size", oid)
		return
	}
	s.objects[oid] = b
}

func (s *Server) putPart(w http.ResponseWriter, r *http.Request) {
	b, ok := storage(w, r)
	if !ok {
		return
	}
	oid := r.PathValue("oid")
	n, err := strconv.Atoi(r.PathValue("n"))
	s.mu.Lock()
	defer s.mu.Unlock()
	size := s.sizes[oid]
	nparts := int((size + s.ChunkSize - 1) / s.ChunkSize)
	want := s.ChunkSize
	if n == nparts {
		want = size - int64(nparts-1)*s.ChunkSize
	}
	if err != nil || n < 1 || n > nparts || int64(len(b)) != want {
		fail(w, http.StatusBadRequest, "", "part %s of %s: %d bytes, want %d", r.PathValue("n"), oid, len(b), want)
		return
	}
	if s.parts[oid] == nil {
		s.parts[oid] = map[int][]byte{}
	}
	s.parts[oid][n] = b
	w.Header().Set("ETag", etag(b))
}

// etag is a storage service's ETag of a part: its quoted MD5.
func etag(b []byte) string {
	sum := md5.Sum(b)
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request) {
	var req struct {
		OID   string `json:"oid"`
		Parts []struct {
			PartNumber int    `json:"partNumber"`
			ETag       string `json:"etag"`
		} `json:"parts"`
	}
	if !decode(w, r, "application/vnd.git-lfs+json", &req) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	oid := r.PathValue("oid")
	parts := s.parts[oid]
	if req.OID != oid || len(req.Parts) != len(parts) || len(parts) == 0 {
		fail(w, http.StatusBadRequest, "", "completion of %s: oid %q, %d parts listed, %d uploaded", oid, req.OID, len(req.Parts), len(parts))
		return
	}
	all := make([]byte, 0, s.sizes[oid])
	for i, p := range req.Parts {
		b, ok := parts[i+1]
		if !ok || p.PartNumber != i+1 || p.ETag != etag(b) {
			fail(w, http.StatusBadRequest, "", "part %d: number %d or etag %s does not match", i+1, p.PartNumber, p.ETag)
			return
		}
		all = append(all, b...)
	}
	if int64(len(all)) != s.sizes[oid] || sha256Hex(all) != oid {
		fail(w, http.StatusBadRequest, "", "the parts of %s do not hash to it", oid)
		return
	}
	s.objects[oid] = all
	delete(s.parts, oid)
}

func (s *Server) verify(w http.ResponseWriter, r *http.Request) {
	if !s.authed(w, r) {
		return
	}
	var req struct {
		OID  string `json:"oid"`
		Size int64  `json:"size"`
	}
	if !decode(w, r, "application/vnd.git-lfs+json", &req) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.objects[req.OID]; !ok || int64(len(b)) != req.Size {
		fail(w, http.StatusNotFound, "", "object %s of %d bytes is not stored", req.OID, req.Size)
	}
}

// commit applies an NDJSON commit atomically: every line is checked before
// the branch moves.
func (s *Server) commit(w http.ResponseWriter, r *http.Request) {
	if !s.authed(w, r) {
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		fail(w, http.StatusBadRequest, "", "Content-Type %q: want application/x-ndjson", ct)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rp, rev, ok := s.lookup(w, r)
	if !ok {
		return
	}
	head := rp.branches[rev]
	next := &commit{parent: head, tree: maps.Clone(rp.commits[head].tree)}
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(nil, 64<<20)
	for line := 0; sc.Scan(); line++ {
		var item struct {
			Key   string          `json:"key"`
			Value json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(sc.Bytes(), &item); err != nil {
			fail(w, http.StatusBadRequest, "", "line %d: %v", line+1, err)
			return
		}
		if (line == 0) != (item.Key == "header") {
			fail(w, http.StatusBadRequest, "", "line %d: the header comes first, and only once", line+1)
			return
		}
		dec := json.NewDecoder(bytes.NewReader(item.Value))
		dec.DisallowUnknownFields()
		var err error
		switch item.Key {
		case "header":
			var h struct{ Summary, Description, ParentCommit string }
			if err = dec.Decode(&h); err == nil && h.Summary == "" {
				err = fmt.Errorf("empty summary")
			}
			if err == nil && h.ParentCommit != "" && h.ParentCommit != head {
				fail(w, http.StatusPreconditionFailed, "", "A commit has happened since. Please refresh and try again.")
				return
			}
			next.summary = h.Summary
		case "file":
			var f struct{ Content, Path, Encoding string }
			if err = dec.Decode(&f); err == nil {
				var b []byte
				if b, err = base64.StdEncoding.DecodeString(f.Content); err == nil && f.Encoding == "base64" && f.Path != "" {
					next.tree[f.Path] = entry{oid: gitOID(b), data: b}
				} else if err == nil {
					err = fmt.Errorf("file %q: want base64 content and a path", f.Path)
				}
			}
		case "lfsFile":
			var f struct {
				Path, Algo, OID string
				Size            int64
			}
			if err = dec.Decode(&f); err == nil {
				if b, stored := s.objects[f.OID]; !stored || f.Algo != "sha256" || int64(len(b)) != f.Size || f.Path == "" {
					fail(w, http.StatusUnprocessableEntity, "", "lfsFile %q: object %s of %d bytes was never uploaded", f.Path, f.OID, f.Size)
					return
				} else {
					next.tree[f.Path] = entry{lfs: true, oid: f.OID, data: b}
				}
			}
		case "deletedFile":
			var f struct{ Path string }
			if err = dec.Decode(&f); err == nil {
				if _, ok := next.tree[f.Path]; !ok {
					fail(w, http.StatusNotFound, "EntryNotFound", "deletedFile %q is not in %s", f.Path, rev)
					return
				}
				delete(next.tree, f.Path)
			}
		default:
			err = fmt.Errorf("unknown key %q", item.Key)
		}
		if err != nil {
			fail(w, http.StatusBadRequest, "", "line %d (%s): %v", line+1, item.Key, err)
			return
		}
	}
	if next.summary == "" {
		fail(w, http.StatusBadRequest, "", "no header line")
		return
	}
	sha := s.addCommit(rp, next)
	rp.branches[rev] = sha
	id := r.PathValue("owner") + "/" + r.PathValue("name")
	reply(w, map[string]any{"success": true, "commitOid": sha, "commitUrl": s.URL + "/" + id + "/commit/" + sha})
}
