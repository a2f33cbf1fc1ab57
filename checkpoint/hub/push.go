package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// PushOptions say what to push where.
type PushOptions struct {
	Repo RepoID
	// Revision is the branch to commit to ("" is main); a missing branch
	// is made from the default branch's head.
	Revision string
	// Private makes a repository that does not exist yet private; it does
	// not change an existing one.
	Private bool
	// Dir is the directory whose files are pushed.
	Dir string
	// Extra are generated files (path in the repository → content) pushed
	// beside Dir's, such as a model card; a file of the same path in Dir
	// wins.
	Extra map[string][]byte
	// Delete removes files from the branch that the push does not hold
	// (.gitattributes excepted), so the commit holds exactly these files.
	Delete bool
	// Message and Description are the commit's summary and body.
	Message, Description string
	// Workers upload files in parallel (default 4).
	Workers int
	// Progress receives progress bars and Log a line per step; nil is
	// silent.
	Progress, Log io.Writer
}

// PushResult says what a push did.
type PushResult struct {
	// Commit is the sha of the new commit, or of the branch head when
	// nothing changed (Unchanged); CommitURL shows it on the Hub.
	Commit, CommitURL string
	Unchanged         bool
	// CreatedRepo and CreatedBranch report what the push had to make.
	CreatedRepo, CreatedBranch bool
	// Uploaded counts the large files sent to storage now and
	// UploadedBytes their size; AlreadyStored those the Hub held already
	// (from an earlier, interrupted push, or the same content elsewhere).
	Uploaded, AlreadyStored int
	UploadedBytes           int64
	// Changed and Deleted are the paths the commit adds or changes and
	// removes; Unmodified those it leaves as they were.
	Changed, Deleted, Unmodified []string
}

// Push commits o.Dir's files to o.Repo as one commit. See the package
// comment for the protocol and for what an interrupted push leaves.
func Push(ctx context.Context, c *Client, o PushOptions) (*PushResult, error) {
	if c.Token == "" {
		return nil, ErrNoToken
	}
	rev := o.Revision
	if rev == "" {
		rev = "main"
	}
	logf := func(format string, args ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", args...)
		}
	}
	files, skipped, err := listFiles(o.Dir)
	if err != nil {
		return nil, err
	}
	for _, s := range skipped {
		logf("skipping %s (not a regular file, or a leftover temporary file)", s)
	}
	have := map[string]bool{}
	for _, f := range files {
		have[f.Path] = true
	}
	for p, content := range o.Extra {
		if err := validRepoPath(p); err != nil {
			return nil, err
		}
		if !have[p] {
			files = append(files, &localFile{Path: p, Content: content, Size: int64(len(content))})
			have[p] = true
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("hub: %s holds no files to push", o.Dir)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })

	if _, err := c.whoami(ctx); err != nil {
		return nil, err
	}
	res := &PushResult{}
	head, err := c.ensureRevision(ctx, o.Repo, rev, o.Private, res, logf)
	if err != nil {
		return nil, err
	}

	plan, err := c.planCommit(ctx, o, rev, files, head, res, logf)
	if err != nil {
		return nil, err
	}
	if len(plan.ops) == 0 {
		res.Unchanged, res.Commit = true, head.SHA
		res.CommitURL = c.commitURL(o.Repo, head.SHA)
		logf("nothing changed: %s at %s is already %s", o.Repo, rev, head.SHA)
		return res, nil
	}
	if err := c.uploadAll(ctx, o, rev, plan.uploads, res, logf); err != nil {
		return nil, err
	}
	msg := o.Message
	if msg == "" {
		msg = fmt.Sprintf("Upload %d files with lowbit push", len(res.Changed))
	}
	h := commitHeader{Summary: msg, Description: o.Description, ParentCommit: head.SHA}
	cr, err := c.commitOnce(ctx, o.Repo, rev, h, plan)
	if err != nil {
		return nil, err
	}
	res.Commit, res.CommitURL = cr.CommitOID, cr.CommitURL
	if res.CommitURL == "" {
		res.CommitURL = c.commitURL(o.Repo, cr.CommitOID)
	}
	return res, nil
}

func (c *Client) commitURL(repo RepoID, sha string) string {
	return c.Endpoint + "/" + repo.String() + "/commit/" + sha
}

// ensureRevision returns the branch's head, making the repository or the
// branch when missing.
func (c *Client) ensureRevision(ctx context.Context, repo RepoID, rev string, private bool, res *PushResult,
	logf func(string, ...any)) (*revisionInfo, error) {
	info, err := c.revision(ctx, repo, rev)
	if notFound(err, "RepoNotFound") {
		if err := c.createRepo(ctx, repo, private); err != nil {
			return nil, err
		}
		res.CreatedRepo = true
		vis := "public"
		if private {
			vis = "private"
		}
		logf("created %s repository %s/%s", vis, c.Endpoint, repo)
		info, err = c.revision(ctx, repo, rev)
	}
	if notFound(err, "RevisionNotFound") {
		if err := c.createBranch(ctx, repo, rev); err != nil {
			return nil, err
		}
		res.CreatedBranch = true
		logf("created branch %s of %s", rev, repo)
		info, err = c.revision(ctx, repo, rev)
	}
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Hint == "" && notFound(err, "RepoNotFound") {
			e.Hint = fmt.Sprintf("the token from %s cannot see %s, though it exists: check the name, and that the token may read and write it",
				c.tokenSource(), repo)
		}
		return nil, err
	}
	if private && !info.Private && !res.CreatedRepo {
		logf("note: --private does not change an existing repository; %s stays public", repo)
	}
	return info, nil
}

// commitPlan is what the commit will hold.
type commitPlan struct {
	ops []commitOp
	// expect maps each added or changed path to the oid the Hub will
	// report for it once committed; deleted lists removed paths.
	expect  map[string]string
	asked   map[string]preuploadFile // the preupload description of each expected path
	deleted []string
	uploads []*localFile // large files whose objects are to be uploaded
}

// planCommit asks the Hub how to upload each file, hashes the large ones,
// and leaves out what the branch holds already.
func (c *Client) planCommit(ctx context.Context, o PushOptions, rev string, files []*localFile, head *revisionInfo,
	res *PushResult, logf func(string, ...any)) (*commitPlan, error) {
	pf := make([]preuploadFile, len(files))
	for i, f := range files {
		if err := f.readSample(); err != nil {
			return nil, err
		}
		pf[i] = preuploadFile{Path: f.Path, Sample: encodeSample(f.Sample), Size: f.Size}
	}
	modes, err := c.preupload(ctx, o.Repo, rev, pf)
	if err != nil {
		return nil, err
	}
	var large []*localFile
	var largeBytes int64
	for _, f := range files {
		if m := modes[f.Path]; m.UploadMode == "lfs" && !m.ShouldIgnore && f.Size > 0 {
			large = append(large, f)
			largeBytes += f.Size
		}
	}
	if len(large) > 0 {
		bar := newBar(o.Progress, largeBytes, fmt.Sprintf("hashing %d files", len(large)))
		cnt := &counter{add: bar.add}
		for _, f := range large {
			if err := f.hash(cnt); err != nil {
				return nil, err
			}
		}
		bar.finish()
	}
	p := &commitPlan{expect: map[string]string{}, asked: map[string]preuploadFile{}}
	for i, f := range files {
		m := modes[f.Path]
		if m.ShouldIgnore {
			logf("skipping %s: the repository's .gitignore ignores it", f.Path)
			continue
		}
		var op commitOp
		var oid string
		if m.UploadMode == "lfs" && f.Size > 0 {
			oid = f.SHA256
			op = commitOp{"lfsFile", lfsFile{Path: f.Path, Algo: "sha256", OID: oid, Size: f.Size}}
		} else {
			// An empty file is never LFS (storage refuses empty objects).
			b, err := f.content()
			if err != nil {
				return nil, err
			}
			oid = gitBlobSHA1(b)
			op = newRegularOp(f.Path, b)
		}
		if m.OID != nil && *m.OID == oid {
			res.Unmodified = append(res.Unmodified, f.Path)
			continue
		}
		if op.Key == "lfsFile" {
			p.uploads = append(p.uploads, f)
		}
		p.ops = append(p.ops, op)
		p.expect[f.Path] = oid
		p.asked[f.Path] = pf[i]
		res.Changed = append(res.Changed, f.Path)
	}
	if o.Delete {
		local := map[string]bool{}
		for _, f := range files {
			local[f.Path] = true
		}
		for _, s := range head.Siblings {
			if !local[s.RFilename] && s.RFilename != ".gitattributes" {
				p.ops = append(p.ops, commitOp{"deletedFile", deletedFile{s.RFilename}})
				p.deleted = append(p.deleted, s.RFilename)
			}
		}
		res.Deleted = p.deleted
		if len(p.deleted) > 0 {
			logf("deleting %d files the directory does not hold: %v", len(p.deleted), p.deleted)
		}
	}
	return p, nil
}

// uploadAll sends the large files' objects the Hub does not hold yet,
// Workers at a time.
func (c *Client) uploadAll(ctx context.Context, o PushOptions, rev string, files []*localFile, res *PushResult,
	logf func(string, ...any)) error {
	if len(files) == 0 {
		return nil
	}
	// Files with the same content share one object.
	byOID := map[string]*localFile{}
	var objs []lfsObject
	for _, f := range files {
		if byOID[f.SHA256] == nil {
			byOID[f.SHA256] = f
			objs = append(objs, lfsObject{f.SHA256, f.Size})
		}
	}
	actions, err := c.lfsBatch(ctx, o.Repo, rev, objs)
	if err != nil {
		return err
	}
	var todo []*localFile
	var total int64
	for _, ob := range objs {
		a := actions[ob.OID]
		if a.Actions == nil || a.Actions.Upload == nil {
			res.AlreadyStored++
			continue
		}
		f := byOID[ob.OID]
		todo = append(todo, f)
		total += f.Size
	}
	if res.AlreadyStored > 0 {
		logf("%d large files are on the Hub already (an earlier push, or the same content): not uploading them again", res.AlreadyStored)
	}
	if len(todo) == 0 {
		return nil
	}
	bar := newBar(o.Progress, total, fmt.Sprintf("uploading %d files", len(todo)))
	cnt := &counter{add: bar.add}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers := o.Workers
	if workers <= 0 {
		workers = 4
	}
	jobs := make(chan *localFile)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range min(workers, len(todo)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range jobs {
				if err := c.uploadObject(ctx, f, actions[f.SHA256], cnt); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
						cancel()
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, f := range todo {
		select {
		case jobs <- f:
		case <-ctx.Done():
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("%w\nnothing was committed; files uploaded so far are kept, and pushing again uploads only the rest", firstErr)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	bar.finish()
	res.Uploaded, res.UploadedBytes = len(todo), cnt.total.Load()
	return nil
}

// commitOnce commits plan, making sure it is committed at most once: when
// the answer is lost (a network error or a 5xx), it reads the branch
// again; if the branch is still at the parent it commits again, and if it
// moved, it accepts the new head only when it holds exactly the planned
// files.
func (c *Client) commitOnce(ctx context.Context, repo RepoID, rev string, h commitHeader, p *commitPlan) (*commitResult, error) {
	wait := c.Backoff
	for attempt := 1; ; attempt++ {
		cr, err := c.commit(ctx, repo, rev, h, p.ops)
		if err == nil {
			return cr, nil
		}
		var e *Error
		if errors.As(err, &e) && !transient(e) {
			if e.Status == http.StatusPreconditionFailed || e.Status == http.StatusConflict {
				e.Hint = fmt.Sprintf("%s at %s moved during the push (another commit): push again; uploaded files are kept", repo, rev)
			}
			return nil, err
		}
		if ctx.Err() != nil || attempt >= max(c.MaxAttempts, 1) {
			return nil, fmt.Errorf("%w\nwhether the commit was made is unknown: read %s/%s/tree/%s, or push again (it commits only what is missing)",
				err, c.Endpoint, repo, rev)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		if wait *= 2; c.MaxBackoff > 0 && wait > c.MaxBackoff {
			wait = c.MaxBackoff
		}
		now, rerr := c.revision(ctx, repo, rev)
		if rerr != nil {
			continue
		}
		if now.SHA == h.ParentCommit {
			continue // not committed: commit again
		}
		ok, lerr := c.holds(ctx, repo, rev, now, p)
		if lerr != nil {
			continue
		}
		if !ok {
			return nil, fmt.Errorf("hub: commit to %s at %s: the answer was lost and the branch moved to %s, which does not hold these files: push again",
				repo, rev, now.SHA)
		}
		return &commitResult{CommitOID: now.SHA, CommitURL: c.commitURL(repo, now.SHA)}, nil
	}
}

// holds reports whether the branch at now holds the plan's files with the
// planned contents and none of its deleted ones.
func (c *Client) holds(ctx context.Context, repo RepoID, rev string, now *revisionInfo, p *commitPlan) (bool, error) {
	present := map[string]bool{}
	for _, s := range now.Siblings {
		present[s.RFilename] = true
	}
	for _, d := range p.deleted {
		if present[d] {
			return false, nil
		}
	}
	var pf []preuploadFile
	for _, f := range p.asked {
		pf = append(pf, f)
	}
	if len(pf) == 0 {
		return true, nil
	}
	modes, err := c.preupload(ctx, repo, rev, pf)
	if err != nil {
		return false, err
	}
	for path, oid := range p.expect {
		if m := modes[path]; m.OID == nil || *m.OID != oid {
			return false, nil
		}
	}
	return true, nil
}

// bar is a byte progress bar, or nothing when there is no writer.
type bar struct{ pb *progressbar.ProgressBar }

func newBar(w io.Writer, total int64, desc string) bar {
	if w == nil || total <= 0 {
		return bar{}
	}
	return bar{progressbar.NewOptions64(total,
		progressbar.OptionSetDescription(desc),
		progressbar.OptionSetWriter(w),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowTotalBytes(true),
		progressbar.OptionSetWidth(10),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionShowCount(),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
		progressbar.OptionFullWidth(),
		progressbar.OptionSetRenderBlankState(true),
	)}
}

func (b bar) add(n int64) {
	if b.pb != nil {
		b.pb.Add64(n)
	}
}

func (b bar) finish() {
	if b.pb != nil {
		b.pb.Finish()
	}
}
