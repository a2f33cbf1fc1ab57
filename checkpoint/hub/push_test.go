package hub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lowbit-ai/lowbit/checkpoint/hub/hubtest"
)

const testToken = "hf_test_token"

func newHub(t *testing.T) *hubtest.Server {
	t.Helper()
	s := hubtest.New(testToken, "alice")
	s.Orgs = []string{"lowbit-org"}
	t.Cleanup(s.Close)
	return s
}

func testClient(t *testing.T, endpoint string) *Client {
	t.Helper()
	c, err := NewClient(endpoint, testToken, "$HF_TOKEN")
	if err != nil {
		t.Fatal(err)
	}
	c.Backoff, c.MaxBackoff = time.Millisecond, 4*time.Millisecond
	return c
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// writeDir writes a checkpoint-like directory: small text files (regular),
// a binary file (LFS, basic transfer), a large one (LFS, multipart: 100 KiB
// in 16 KiB parts), a duplicate of the binary and an empty file.
func writeDir(t *testing.T) (string, map[string][]byte) {
	t.Helper()
	files := map[string][]byte{
		"config.json":                 []byte(`{"model_type": "qwen3"}` + "\n"),
		"tokenizer/tokenizer.json":    bytes.Repeat([]byte(`{"a": 1}`), 20),
		"shard-1.safetensors":         randBytes(1, 5000),
		"shard-2.bin":                 randBytes(2, 100<<10),
		"copy-of-shard-1.safetensors": randBytes(1, 5000),
		"empty.txt":                   {},
	}
	dir := t.TempDir()
	for p, b := range files {
		path := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// An interrupted atomic write's leftover is not pushed.
	if err := os.WriteFile(filepath.Join(dir, ".shard-3.safetensors.tmp-123"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, files
}

func oidOf(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// checkFiles compares the branch with want (plus the repository's
// .gitattributes).
func checkFiles(t *testing.T, s *hubtest.Server, repo, branch string, want map[string][]byte) {
	t.Helper()
	got := s.Files(repo, branch)
	for p, b := range want {
		if !bytes.Equal(got[p], b) {
			t.Errorf("%s on the Hub: %d bytes differ from the %d pushed", p, len(got[p]), len(b))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok && p != ".gitattributes" {
			t.Errorf("the Hub holds %s, which was not pushed", p)
		}
	}
}

func count(reqs []string, prefix string) int {
	n := 0
	for _, r := range reqs {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

func TestPushNewRepoThenUnchangedThenChanged(t *testing.T) {
	s := newHub(t)
	c := testClient(t, s.URL)
	dir, files := writeDir(t)
	ctx := context.Background()
	var log bytes.Buffer
	o := PushOptions{Repo: RepoID{"lowbit-org", "tiny-fp8"}, Private: true, Dir: dir, Delete: true, Log: &log}
	res, err := Push(ctx, c, o)
	if err != nil {
		t.Fatal(err)
	}
	head, depth := s.Head("lowbit-org/tiny-fp8", "main")
	if res.Commit != head || depth != 2 || !res.CreatedRepo || !s.Private("lowbit-org/tiny-fp8") {
		t.Fatalf("commit %s, head %s, depth %d, created %v, private %v: want one commit on a new private repository",
			res.Commit, head, depth, res.CreatedRepo, s.Private("lowbit-org/tiny-fp8"))
	}
	checkFiles(t, s, "lowbit-org/tiny-fp8", "main", files)
	// Two objects (the duplicate shares one), the large one in 7 parts.
	if res.Uploaded != 2 || res.UploadedBytes != 5000+100<<10 {
		t.Errorf("uploaded %d objects, %d bytes: want 2, %d", res.Uploaded, res.UploadedBytes, 5000+100<<10)
	}
	reqs := s.Requests()
	if n := count(reqs, "PUT /lfs/part/"); n != 7 {
		t.Errorf("%d part uploads, want 7", n)
	}
	if n := count(reqs, "PUT /lfs/basic/"); n != 1 {
		t.Errorf("%d basic uploads, want 1", n)
	}
	if strings.Contains(strings.Join(reqs, "\n"), "tmp-123") {
		t.Error("the leftover temporary file was pushed")
	}
	if !strings.Contains(log.String(), "created private repository") {
		t.Errorf("log does not say the repository was created:\n%s", log.String())
	}

	// Again, unchanged: no upload, no commit, the same sha.
	before := len(s.Requests())
	res2, err := Push(ctx, c, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, d := s.Head("lowbit-org/tiny-fp8", "main"); !res2.Unchanged || res2.Commit != head || d != 2 {
		t.Errorf("unchanged push: %+v, depth %d: want no commit and sha %s", res2, d, head)
	}
	if n := count(s.Requests()[before:], "PUT "); n != 0 {
		t.Errorf("unchanged push uploaded %d times", n)
	}

	// Change one file, remove one: the commit holds exactly the directory.
	files["config.json"] = []byte(`{"model_type": "qwen3", "changed": true}`)
	os.WriteFile(filepath.Join(dir, "config.json"), files["config.json"], 0o644)
	os.Remove(filepath.Join(dir, "empty.txt"))
	delete(files, "empty.txt")
	res3, err := Push(ctx, c, o)
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, s, "lowbit-org/tiny-fp8", "main", files)
	if strings.Join(res3.Changed, ",") != "config.json" || strings.Join(res3.Deleted, ",") != "empty.txt" {
		t.Errorf("changed %v, deleted %v: want [config.json], [empty.txt]", res3.Changed, res3.Deleted)
	}

	// Without Delete, a file the directory lacks stays.
	os.Remove(filepath.Join(dir, "copy-of-shard-1.safetensors"))
	o.Delete = false
	if _, err := Push(ctx, c, o); err != nil {
		t.Fatal(err)
	}
	if s.Files("lowbit-org/tiny-fp8", "main")["copy-of-shard-1.safetensors"] == nil {
		t.Error("a push without Delete removed a file")
	}
}

func TestPushRetriesFailedRequests(t *testing.T) {
	s := newHub(t)
	var part3, basic, batch atomic.Int32
	s.Fault = func(r *http.Request) hubtest.FaultKind {
		switch {
		case strings.HasSuffix(r.URL.Path, "/3") && r.Method == http.MethodPut && part3.Add(1) == 1:
			return hubtest.Status500
		case strings.HasPrefix(r.URL.Path, "/lfs/basic/") && basic.Add(1) == 1:
			return hubtest.Drop // the connection breaks mid-upload
		case strings.HasSuffix(r.URL.Path, "/objects/batch") && batch.Add(1) == 1:
			return hubtest.Drop
		}
		return hubtest.None
	}
	dir, files := writeDir(t)
	res, err := Push(context.Background(), testClient(t, s.URL), PushOptions{Repo: RepoID{"alice", "m"}, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, s, "alice/m", "main", files)
	if part3.Load() != 2 || basic.Load() != 2 || batch.Load() != 2 {
		t.Errorf("tries: part 3 %d, basic %d, batch %d: want each failed once, then retried once", part3.Load(), basic.Load(), batch.Load())
	}
	if res.UploadedBytes != 5000+100<<10 {
		t.Errorf("uploaded bytes %d count a failed attempt: want %d", res.UploadedBytes, 5000+100<<10)
	}
}

// A push that fails mid-upload commits nothing; pushing again uploads only
// what is missing and commits once.
func TestPushInterruptedThenResumed(t *testing.T) {
	s := newHub(t)
	c := testClient(t, s.URL)
	var fail atomic.Bool
	fail.Store(true)
	s.Fault = func(r *http.Request) hubtest.FaultKind {
		if fail.Load() && strings.HasPrefix(r.URL.Path, "/lfs/part/") && strings.HasSuffix(r.URL.Path, "/5") {
			return hubtest.Status500
		}
		return hubtest.None
	}
	dir, files := writeDir(t)
	o := PushOptions{Repo: RepoID{"alice", "m"}, Dir: dir, Workers: 1}
	_, err := Push(context.Background(), c, o)
	if err == nil || !strings.Contains(err.Error(), "nothing was committed") || !strings.Contains(err.Error(), "pushing again uploads only the rest") {
		t.Fatalf("interrupted push: err %v: want a failure that says nothing was committed", err)
	}
	head, depth := s.Head("alice/m", "main")
	if depth != 1 || s.Files("alice/m", "main")["config.json"] != nil {
		t.Fatalf("after a failed push the branch is at depth %d (head %s): want the initial commit alone", depth, head)
	}
	if !s.Stored(oidOf(files["shard-1.safetensors"])) {
		t.Fatal("the object uploaded before the failure was not kept")
	}
	fail.Store(false)
	before := len(s.Requests())
	res, err := Push(context.Background(), c, o)
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, s, "alice/m", "main", files)
	if _, d := s.Head("alice/m", "main"); d != 2 {
		t.Errorf("depth %d after the resumed push: want 2", d)
	}
	again := s.Requests()[before:]
	if res.AlreadyStored != 1 || res.Uploaded != 1 || count(again, "PUT /lfs/basic/") != 0 {
		t.Errorf("resumed push: %d already stored, %d uploaded, %d basic PUTs: want 1, 1, 0",
			res.AlreadyStored, res.Uploaded, count(again, "PUT /lfs/basic/"))
	}
}

func TestCommitIsMadeOnce(t *testing.T) {
	for _, kind := range []hubtest.FaultKind{hubtest.LoseAnswer, hubtest.Status500, hubtest.Drop} {
		s := newHub(t)
		var n atomic.Int32
		s.Fault = func(r *http.Request) hubtest.FaultKind {
			if strings.Contains(r.URL.Path, "/commit/") && n.Add(1) == 1 {
				return kind
			}
			return hubtest.None
		}
		dir, files := writeDir(t)
		res, err := Push(context.Background(), testClient(t, s.URL), PushOptions{Repo: RepoID{"alice", "m"}, Dir: dir})
		if err != nil {
			t.Fatalf("fault %d: %v", kind, err)
		}
		head, depth := s.Head("alice/m", "main")
		if res.Commit != head || depth != 2 {
			t.Errorf("fault %d: commit %s, head %s, depth %d: want exactly one commit, reported", kind, res.Commit, head, depth)
		}
		checkFiles(t, s, "alice/m", "main", files)
	}
}

func TestPushRefusesToOverwriteAConcurrentCommit(t *testing.T) {
	s := newHub(t)
	s.AddRepo("alice/m", false, nil)
	var once atomic.Bool
	s.Fault = func(r *http.Request) hubtest.FaultKind {
		if strings.Contains(r.URL.Path, "/commit/") && !once.Swap(true) {
			s.AddRepoCommit("alice/m", "main", map[string][]byte{"other.txt": []byte("someone else")})
		}
		return hubtest.None
	}
	dir, _ := writeDir(t)
	_, err := Push(context.Background(), testClient(t, s.URL), PushOptions{Repo: RepoID{"alice", "m"}, Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "moved during the push") {
		t.Fatalf("err %v: want the branch-moved error", err)
	}
	if s.Files("alice/m", "main")["config.json"] != nil {
		t.Error("the push overwrote a concurrent commit")
	}
}

func TestPushMakesBranchAndFollowsMirrorURLs(t *testing.T) {
	s := newHub(t)
	s.HrefBase = DefaultEndpoint // the mirror hands out the public Hub's URLs
	s.AddRepo("alice/m", false, map[string][]byte{"README.md": []byte("hi")})
	dir, files := writeDir(t)
	res, err := Push(context.Background(), testClient(t, s.URL), PushOptions{Repo: RepoID{"alice", "m"}, Revision: "fp8-v2", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !res.CreatedBranch {
		t.Error("the branch was not reported as created")
	}
	files["README.md"] = []byte("hi")
	checkFiles(t, s, "alice/m", "fp8-v2", files)
	if s.Files("alice/m", "main")["config.json"] != nil {
		t.Error("the push to a branch changed main")
	}
}

func TestPushExtraFiles(t *testing.T) {
	s := newHub(t)
	dir, files := writeDir(t)
	extra := map[string][]byte{"README.md": []byte("# card\n"), "config.json": []byte("not this one")}
	if _, err := Push(context.Background(), testClient(t, s.URL), PushOptions{Repo: RepoID{"alice", "m"}, Dir: dir, Extra: extra}); err != nil {
		t.Fatal(err)
	}
	files["README.md"] = extra["README.md"]
	checkFiles(t, s, "alice/m", "main", files) // config.json: the directory's wins
}

func TestPushBadInput(t *testing.T) {
	s := newHub(t)
	dir, _ := writeDir(t)
	ctx := context.Background()
	closed := hubtest.New(testToken, "alice")
	closed.Close()
	tests := []struct {
		name   string
		client func() *Client
		o      PushOptions
		want   []string
	}{
		{"no token", func() *Client { c := testClient(t, s.URL); c.Token = ""; return c },
			PushOptions{Repo: RepoID{"alice", "m"}, Dir: dir}, []string{"HF_TOKEN", "hf auth login"}},
		{"refused token", func() *Client { c := testClient(t, s.URL); c.Token = "hf_wrong"; return c },
			PushOptions{Repo: RepoID{"alice", "m"}, Dir: dir}, []string{"HTTP 401", "refused the token from $HF_TOKEN", "settings/tokens"}},
		{"namespace not writable", func() *Client { return testClient(t, s.URL) },
			PushOptions{Repo: RepoID{"meta-llama", "m"}, Dir: dir}, []string{"HTTP 403", "meta-llama/m does not exist", "/new"}},
		{"network down", func() *Client { return testClient(t, closed.URL) },
			PushOptions{Repo: RepoID{"alice", "m"}, Dir: dir}, []string{"cannot reach", "--endpoint", "5 attempts"}},
		{"missing directory", func() *Client { return testClient(t, s.URL) },
			PushOptions{Repo: RepoID{"alice", "m"}, Dir: filepath.Join(dir, "nope")}, []string{"no such file"}},
		{"empty directory", func() *Client { return testClient(t, s.URL) },
			PushOptions{Repo: RepoID{"alice", "m"}, Dir: t.TempDir()}, []string{"holds no files"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Push(ctx, tt.client(), tt.o)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestParseRepoID(t *testing.T) {
	for _, tt := range []struct {
		in string
		ok bool
	}{
		{"Qwen/Qwen3-8B", true}, {"my-org/qwen3.8b_fp8", true}, {"a/b", true},
		{"noslash", false}, {"/name", false}, {"owner/", false}, {"a/b/c", false}, {"a/b--c", false},
		{"a/b..c", false}, {"a/-b", false}, {"a/b.git", false}, {"a/b c", false}, {"a/" + strings.Repeat("x", 97), false},
	} {
		_, err := ParseRepoID(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("ParseRepoID(%q) = %v, want ok %v", tt.in, err, tt.ok)
		}
	}
}
