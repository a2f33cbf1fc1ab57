package arena

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// CheckOptions say how to start an engine directory for Check.
type CheckOptions struct {
	// EngineDir holds launch.sh; Artifact is the checkpoint to serve.
	EngineDir, Artifact string
	// Tokenizer and GenerationConfig are the source model's directories
	// ("" is Artifact, which carries both when written by lowbit).
	Tokenizer, GenerationConfig string
	// KVCacheDType is auto or fp8 (default auto).
	KVCacheDType string
	// GPUMemoryUtilization is passed as given (default 0.90).
	GPUMemoryUtilization string
	// LanguageModelOnly sets LANGUAGE_MODEL_ONLY=1.
	LanguageModelOnly bool
	// MaxModelLen is MAX_MODEL_LEN on the first start (0: the arena's 32768
	// or the model's max_position_embeddings if smaller); the second start
	// uses half of it.
	MaxModelLen int
	// StartTimeout bounds the wait for /health (default 10 minutes),
	// RequestTimeout each probe (default 5 minutes), StopTimeout the wait
	// for the process group to exit after SIGTERM (default 30 seconds).
	StartTimeout, RequestTimeout, StopTimeout time.Duration
	// Log receives a line per step (nil: silent).
	Log io.Writer
	// KeepWorkDir leaves the staged directories and server logs.
	KeepWorkDir bool
}

// Status grades a Finding.
type Status int

const (
	Pass Status = iota
	// Warn is worth knowing but within the contract.
	Warn
	// Violation breaks the contract: the arena would fail or score zero.
	Violation
)

func (s Status) String() string {
	return [...]string{"ok", "warning", "VIOLATION"}[s]
}

// Finding is one checked property.
type Finding struct {
	Start  int    // 1 or 2: which start it was seen on; 0 for neither
	Check  string // what was checked
	Status Status
	Detail string
}

// Report is Check's result.
type Report struct {
	Findings []Finding
	// WorkDir holds the staged directories and the server logs
	// (start1.log, start2.log) when KeepWorkDir was set.
	WorkDir string
}

// Violations counts the findings that break the contract.
func (r *Report) Violations() int {
	n := 0
	for _, f := range r.Findings {
		if f.Status == Violation {
			n++
		}
	}
	return n
}

func (r *Report) String() string {
	var sb strings.Builder
	for _, f := range r.Findings {
		where := ""
		if f.Start > 0 {
			where = fmt.Sprintf("start %d: ", f.Start)
		}
		fmt.Fprintf(&sb, "%-9s %s%s: %s\n", f.Status, where, f.Check, f.Detail)
	}
	if n := r.Violations(); n > 0 {
		fmt.Fprintf(&sb, "%d contract violations\n", n)
	} else {
		sb.WriteString("no contract violations\n")
	}
	return sb.String()
}

// start is one start of the engine and what the probes use.
type start struct {
	n          int
	port       int
	name       string
	maxLen     int
	cmd        *exec.Cmd
	exited     chan struct{}
	waitErr    error
	logPath    string
	client     *http.Client
	base       string
	vocab      int
	report     *Report
	timeout    time.Duration
	stopWithin time.Duration
}

func (s *start) add(check string, st Status, format string, args ...any) {
	s.report.Findings = append(s.report.Findings, Finding{Start: s.n, Check: check, Status: st, Detail: fmt.Sprintf(format, args...)})
}

// Check starts the engine as LowBArena would, twice, and probes it. It
// returns an error only when it cannot run the check at all (bad input);
// what the engine does wrong is in the Report.
func Check(ctx context.Context, o CheckOptions) (*Report, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	model, err := readModelLimits(o.Artifact)
	if err != nil {
		return nil, err
	}
	rep := &Report{}
	if st, err := os.Stat(filepath.Join(o.EngineDir, "launch.sh")); err != nil || !st.Mode().IsRegular() {
		rep.Findings = append(rep.Findings, Finding{Check: "launch.sh", Status: Violation,
			Detail: fmt.Sprintf("%s has no launch.sh: the arena runs `launch.sh serve` and nothing else", o.EngineDir)})
		return rep, nil
	}
	maxLen := o.MaxModelLen
	if maxLen == 0 {
		maxLen = 32768
		if model.maxPositions > 0 && model.maxPositions < maxLen {
			maxLen = model.maxPositions
		}
	}
	logf := func(format string, args ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", args...)
		}
	}
	st, err := stage(o)
	if err != nil {
		return nil, err
	}
	defer func() {
		if o.KeepWorkDir {
			rep.WorkDir = st.work
		} else {
			st.remove()
		}
	}()
	if st.cred == nil {
		rep.Findings = append(rep.Findings, Finding{Check: "user", Status: Warn,
			Detail: fmt.Sprintf("not root, so the engine runs as this user (uid %d) rather than a fresh unprivileged one", os.Getuid())})
	}
	before, err := snapshot(st.artifact)
	if err != nil {
		return nil, err
	}
	starts := []struct {
		name   string
		maxLen int
	}{{"lowbit-check-a", maxLen}, {"lowbit-check-b", max(maxLen/2, 16)}}
	var prevPort int
	for i, sp := range starts {
		port, err := freePort(prevPort)
		if err != nil {
			return nil, err
		}
		prevPort = port
		s := &start{n: i + 1, port: port, name: sp.name, maxLen: sp.maxLen, report: rep, vocab: model.vocab,
			timeout: o.RequestTimeout, stopWithin: o.StopTimeout, logPath: filepath.Join(st.work, fmt.Sprintf("start%d.log", i+1)),
			client: &http.Client{Timeout: o.RequestTimeout}, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
		logf("start %d: PORT=%d SERVED_NAME=%s MAX_MODEL_LEN=%d", s.n, port, s.name, s.maxLen)
		if err := s.launch(st, o); err != nil {
			return nil, err
		}
		if s.waitHealthy(ctx, o.StartTimeout) {
			logf("start %d: /health answered; probing", s.n)
			s.probeAll(ctx, st.cred != nil)
		}
		s.stop()
	}
	after, err := snapshot(st.artifact)
	if err != nil {
		return nil, err
	}
	if d := diffSnapshots(before, after); d != "" {
		rep.Findings = append(rep.Findings, Finding{Check: "read-only artifact", Status: Violation,
			Detail: "the engine changed the artifact (" + d + "); the arena's copy is read-only"})
	} else {
		rep.Findings = append(rep.Findings, Finding{Check: "read-only artifact", Status: Pass, Detail: "the artifact is unchanged"})
	}
	return rep, nil
}

func (o *CheckOptions) fill() error {
	if o.EngineDir == "" || o.Artifact == "" {
		return errors.New("arena: check needs an engine directory and --artifact MODEL")
	}
	if st, err := os.Stat(o.EngineDir); err != nil || !st.IsDir() {
		return fmt.Errorf("arena: engine directory %s: not a directory (%v)", o.EngineDir, err)
	}
	for _, d := range []*string{&o.Tokenizer, &o.GenerationConfig} {
		if *d == "" {
			*d = o.Artifact
		}
	}
	for what, d := range map[string]string{"artifact": o.Artifact, "tokenizer": o.Tokenizer, "generation config": o.GenerationConfig} {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			return fmt.Errorf("arena: %s %s: want a model directory (%v)", what, d, err)
		}
	}
	switch o.KVCacheDType {
	case "":
		o.KVCacheDType = "auto"
	case "auto", "fp8":
	default:
		return fmt.Errorf("arena: KV cache dtype %q: the arena passes auto or fp8", o.KVCacheDType)
	}
	if o.GPUMemoryUtilization == "" {
		o.GPUMemoryUtilization = "0.90"
	}
	if o.MaxModelLen < 0 {
		return fmt.Errorf("arena: max model len %d", o.MaxModelLen)
	}
	for d, def := range map[*time.Duration]time.Duration{&o.StartTimeout: 10 * time.Minute,
		&o.RequestTimeout: 5 * time.Minute, &o.StopTimeout: 30 * time.Second} {
		if *d <= 0 {
			*d = def
		}
	}
	return nil
}

type modelLimits struct{ maxPositions, vocab int }

// readModelLimits reads max_position_embeddings and vocab_size from
// config.json (or its text_config), whatever the architecture.
func readModelLimits(dir string) (modelLimits, error) {
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return modelLimits{}, fmt.Errorf("arena: artifact %s: %w: want a model directory with config.json", dir, err)
	}
	type limits struct {
		MaxPositions int `json:"max_position_embeddings"`
		Vocab        int `json:"vocab_size"`
	}
	var cfg struct {
		limits
		Text *limits `json:"text_config"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return modelLimits{}, fmt.Errorf("arena: artifact %s: config.json: %w", dir, err)
	}
	l := cfg.limits
	if cfg.Text != nil {
		l.MaxPositions, l.Vocab = max(l.MaxPositions, cfg.Text.MaxPositions), max(l.Vocab, cfg.Text.Vocab)
	}
	return modelLimits{l.MaxPositions, l.Vocab}, nil
}

// freePort returns a loopback port nobody listens on, other than avoid.
func freePort(avoid int) (int, error) {
	for range 10 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("arena: find a free port: %w", err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if p != avoid {
			return p, nil
		}
	}
	return 0, errors.New("arena: no free port")
}

// launch starts `bash launch.sh serve` as the arena does.
func (s *start) launch(st *staged, o CheckOptions) error {
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + st.home, "XDG_CACHE_HOME=" + filepath.Join(st.home, ".cache"),
		"HF_HOME=" + filepath.Join(st.home, ".cache", "huggingface"),
		"ARTIFACT=" + st.artifact, "TOKENIZER=" + st.tokenizer, fmt.Sprintf("PORT=%d", s.port),
		"SERVED_NAME=" + s.name, fmt.Sprintf("MAX_MODEL_LEN=%d", s.maxLen),
		"GPU_MEMORY_UTILIZATION=" + o.GPUMemoryUtilization, "GENERATION_CONFIG=" + st.genConfig,
		"KV_CACHE_DTYPE=" + o.KVCacheDType,
	}
	if o.LanguageModelOnly {
		env = append(env, "LANGUAGE_MODEL_ONLY=1")
	}
	// What a GPU machine needs to find its driver; the arena's image sets
	// its own.
	for _, k := range []string{"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	logFile, err := os.Create(s.logPath)
	if err != nil {
		return fmt.Errorf("arena: %w", err)
	}
	s.cmd = exec.Command("bash", "launch.sh", "serve")
	s.cmd.Dir = st.engine
	s.cmd.Env = env
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: st.cred}
	if err := s.cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("arena: start bash launch.sh serve: %w", err)
	}
	s.exited = make(chan struct{})
	go func() {
		s.waitErr = s.cmd.Wait()
		logFile.Close()
		close(s.exited)
	}()
	return nil
}

// waitHealthy polls /health until it answers 200, the process exits, or
// the timeout passes; the latter two are violations.
func (s *start) waitHealthy(ctx context.Context, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	c := &http.Client{Timeout: 5 * time.Second}
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			s.add("serve", Violation, "launch.sh serve exited (%v) before /health answered on 127.0.0.1:%d; the server log ends:\n%s",
				s.waitErr, s.port, s.logTail())
			return false
		case <-ctx.Done():
			s.add("serve", Violation, "interrupted: %v", ctx.Err())
			return false
		case <-time.After(250 * time.Millisecond):
		}
		resp, err := c.Get(s.base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				s.add("health", Pass, "GET /health answered 200 on 127.0.0.1:$PORT")
				return true
			}
		}
	}
	elsewhere := ""
	if ls, err := listeners(groupProcesses(s.cmd.Process.Pid)); err == nil && len(ls) > 0 {
		var where []string
		for _, l := range ls {
			where = append(where, l.String())
		}
		elsewhere = "; it listens on " + strings.Join(where, ", ") + " instead"
	}
	s.add("serve", Violation, "no 200 from GET /health on 127.0.0.1:%d (the PORT given) within %v%s; the server log ends:\n%s",
		s.port, timeout, elsewhere, s.logTail())
	return false
}

func (s *start) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	if t := tail(b, 2000); t != "" {
		return t
	}
	return "(the server printed nothing)"
}

// stop sends SIGTERM to the process group, as the arena stops an engine,
// and checks that every process in it exits.
func (s *start) stop() {
	pgid := s.cmd.Process.Pid
	select {
	case <-s.exited: // it failed to start: clear what it left
		syscall.Kill(-pgid, syscall.SIGKILL)
		return
	default:
	}
	syscall.Kill(-pgid, syscall.SIGTERM)
	t0 := time.Now()
	deadline := t0.Add(s.stopWithin)
	for {
		left := groupProcesses(pgid)
		select {
		case <-s.exited:
		default:
			if !slices.Contains(left, pgid) {
				left = append(left, pgid)
			}
		}
		if len(left) == 0 {
			s.add("stop", Pass, "SIGTERM to the process group stopped it in %v", time.Since(t0).Round(10*time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			s.add("stop", Violation, "%d processes of the group still ran %v after SIGTERM to the process group (pids %v): "+
				"the server must stop with its process group", len(left), s.stopWithin, left)
			syscall.Kill(-pgid, syscall.SIGKILL)
			<-s.exited
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
