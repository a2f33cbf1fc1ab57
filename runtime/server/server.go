package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/lowbit-ai/lowbit/runtime"
	"github.com/lowbit-ai/lowbit/runtime/engine"
	"github.com/lowbit-ai/lowbit/tokenizer"
	"github.com/lowbit-ai/lowbit/tokenizer/chat"
)

// Engine is what the server needs of the engine (runtime/engine's
// implementation satisfies it). Submit's channel delivers Outputs and is
// closed after the one with Finish or Err set; cancelling ctx makes the
// engine free the request and finish it with engine.FinishAbort.
type Engine interface {
	Submit(ctx context.Context, r *engine.Request) (<-chan engine.Output, error)
	Stats() engine.Stats
}

// runtime/engine's Engine is what lowbit serves with.
var _ Engine = (*engine.Engine)(nil)

// HealthChecker is implemented by engines that can tell whether they are
// still serving; /health answers 503 once Health returns an error.
type HealthChecker interface {
	Health() error
}

// Options configure a Server.
type Options struct {
	// Engine generates; Tokenizer encodes prompts and decodes output.
	Engine    Engine
	Tokenizer *tokenizer.Tokenizer
	// ChatTemplate is the Jinja chat template ("" disables
	// /v1/chat/completions and chat /tokenize with vLLM's error).
	ChatTemplate string
	// RenderChat renders a chat template; nil is chat.Render. Tests
	// inject their own.
	RenderChat func(template string, in chat.Input) (string, error)
	// ServedModelNames: the first is reported in responses; a request may
	// name any of them (or none). At least one.
	ServedModelNames []string
	// ModelRoot is reported as the model's root in /v1/models.
	ModelRoot string
	// MaxModelLen caps prompt plus generated tokens (required).
	MaxModelLen int
	// MaxLogprobs caps logprobs and prompt_logprobs (vLLM's
	// --max-logprobs): 0 means vLLM's default 20, -1 the vocabulary size.
	MaxLogprobs int
	// VocabSize is the model's vocabulary (config.json vocab_size), which
	// a logprobs count of -1 means; 0 takes the tokenizer's.
	VocabSize int
	// DefaultSampling is the sampling a request gets for fields it omits
	// (vLLM's --generation-config auto: the model's
	// generation_config.json). nil is vLLM's own defaults (temperature 1,
	// no filters), as --generation-config vllm.
	DefaultSampling *runtime.SamplingOptions
	// EOSIDs end generation unless a request sets ignore_eos: the
	// tokenizer's eos_token (reported with stop_reason null) and the
	// generation config's eos_token_id (reported with the id, as vLLM
	// does for ids beyond the tokenizer's).
	EOSIDs []int
	// Version is /version's answer.
	Version string
	// Logger logs request failures; nil discards.
	Logger *slog.Logger
	// MaxRequestBytes bounds a request body (default 32 MiB).
	MaxRequestBytes int64
	// MaxPrompts bounds the prompts of one completions request (default
	// 1024) and MaxChoices the choices (prompts × n) of any request
	// (default 1024).
	MaxPrompts, MaxChoices int
	// EnablePromptTokensDetails reports usage.prompt_tokens_details
	// {cached_tokens} (vLLM's --enable-prompt-tokens-details; off by
	// default there, so null).
	EnablePromptTokensDetails bool
}

// Server is the HTTP API. It is an http.Handler.
type Server struct {
	opts          Options
	tok           *tokenizer.Tokenizer
	renderChat    func(string, chat.Input) (string, error)
	defaults      runtime.SamplingOptions
	eos           []int
	primaryEOS    int
	hasPrimaryEOS bool
	vocab         int
	maxLogprobs   int
	metrics       *metrics
	log           *slog.Logger
	created       int64
	baseCtx       context.Context
	closeBase     context.CancelFunc
	closed        atomic.Bool
	engineClosed  atomic.Bool
	routes        map[string]map[string]http.HandlerFunc
}

// New returns a Server for opts.
func New(opts Options) (*Server, error) {
	switch {
	case opts.Engine == nil:
		return nil, errors.New("server: Options.Engine is nil")
	case opts.Tokenizer == nil:
		return nil, errors.New("server: Options.Tokenizer is nil")
	case opts.MaxModelLen <= 0:
		return nil, fmt.Errorf("server: Options.MaxModelLen %d: want > 0", opts.MaxModelLen)
	case len(opts.ServedModelNames) == 0 || slices.Contains(opts.ServedModelNames, ""):
		return nil, errors.New("server: Options.ServedModelNames: want at least one non-empty name")
	}
	s := &Server{opts: opts, tok: opts.Tokenizer, renderChat: opts.RenderChat, log: opts.Logger,
		created: time.Now().Unix(), defaults: runtime.SamplingOptions{Temperature: 1}}
	if s.renderChat == nil {
		s.renderChat = chat.Render
	}
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.DefaultSampling != nil {
		if err := opts.DefaultSampling.Validate(); err != nil {
			return nil, fmt.Errorf("server: Options.DefaultSampling: %w", err)
		}
		s.defaults = *opts.DefaultSampling
		s.defaults.Seed = 0
	}
	s.vocab = opts.VocabSize
	if s.vocab <= 0 {
		s.vocab = s.tok.VocabSize()
	}
	switch {
	case opts.MaxLogprobs == 0:
		s.maxLogprobs = 20
	case opts.MaxLogprobs < 0:
		s.maxLogprobs = s.vocab
	default:
		s.maxLogprobs = opts.MaxLogprobs
	}
	if s.opts.MaxRequestBytes <= 0 {
		s.opts.MaxRequestBytes = 32 << 20
	}
	if s.opts.MaxPrompts <= 0 {
		s.opts.MaxPrompts = 1024
	}
	if s.opts.MaxChoices <= 0 {
		s.opts.MaxChoices = 1024
	}
	s.eos = slices.Clone(opts.EOSIDs)
	if id, ok := s.tok.EOSID(); ok {
		s.primaryEOS, s.hasPrimaryEOS = id, true
		if !slices.Contains(s.eos, id) {
			s.eos = append(s.eos, id)
		}
	}
	s.baseCtx, s.closeBase = context.WithCancel(context.Background())
	s.metrics = newMetrics(s)
	get, post := http.MethodGet, http.MethodPost
	s.routes = map[string]map[string]http.HandlerFunc{
		"/health":              {get: s.handleHealth},
		"/v1/models":           {get: s.handleModels},
		"/version":             {get: s.handleVersion},
		"/metrics":             {get: s.metrics.handler.ServeHTTP},
		"/tokenize":            {post: s.handleTokenize},
		"/detokenize":          {post: s.handleDetokenize},
		"/v1/completions":      {post: s.handleCompletions},
		"/v1/chat/completions": {post: s.handleChat},
	}
	return s, nil
}

// ServeHTTP routes r, answering FastAPI's {"detail": ...} for unknown
// paths and methods, and turns a panic into a 500 rather than a dropped
// connection.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// vLLM allows every origin by default (Starlette's CORSMiddleware with
	// --allowed-origins '*'), so browser clients work against it.
	if r.Header.Get("Origin") != "" {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h := w.Header()
			h.Set("Access-Control-Allow-Methods", "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT")
			h.Set("Access-Control-Max-Age", "600")
			if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
				h.Set("Access-Control-Allow-Headers", req)
			}
			h.Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusOK)
			w.Write([]byte("OK"))
			return
		}
	}
	byMethod, ok := s.routes[r.URL.Path]
	if !ok {
		writeDetail(w, http.StatusNotFound, "Not Found")
		return
	}
	h, ok := byMethod[r.Method]
	if !ok {
		writeDetail(w, http.StatusMethodNotAllowed, "Method Not Allowed")
		return
	}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("panic serving request", "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			writeError(w, internalError(fmt.Sprint("internal error: ", v)))
		}
	}()
	h(w, r)
}

// Close marks the server unhealthy and cancels every request in flight.
// Call it after http.Server.Shutdown has drained what it could.
func (s *Server) Close() {
	s.closed.Store(true)
	s.closeBase()
}

// handleHealth answers 200 with an empty body while the engine serves, 503
// after (vLLM: EngineDeadError).
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	healthy := !s.closed.Load() && !s.engineClosed.Load()
	if hc, ok := s.opts.Engine.(HealthChecker); ok && healthy {
		healthy = hc.Health() == nil
	}
	if !healthy {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleVersion(w http.ResponseWriter, r *http.Request) {
	v := s.opts.Version
	if v == "" {
		v = "unknown"
	}
	writeJSON(w, http.StatusOK, map[string]string{"version": v})
}

type modelPermission struct {
	ID                 string  `json:"id"`
	Object             string  `json:"object"`
	Created            int64   `json:"created"`
	AllowCreateEngine  bool    `json:"allow_create_engine"`
	AllowSampling      bool    `json:"allow_sampling"`
	AllowLogprobs      bool    `json:"allow_logprobs"`
	AllowSearchIndices bool    `json:"allow_search_indices"`
	AllowView          bool    `json:"allow_view"`
	AllowFineTuning    bool    `json:"allow_fine_tuning"`
	Organization       string  `json:"organization"`
	Group              *string `json:"group"`
	IsBlocking         bool    `json:"is_blocking"`
}

type modelCard struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	Created     int64             `json:"created"`
	OwnedBy     string            `json:"owned_by"`
	Root        *string           `json:"root"`
	Parent      *string           `json:"parent"`
	MaxModelLen int               `json:"max_model_len"`
	Permission  []modelPermission `json:"permission"`
}

// handleModels answers vLLM's ModelList, one card per served name.
//
// owned_by is "vllm", vLLM's constant, not "lowbit": harnesses read
// data[0].id and nothing else of the card, and the point of this server is
// that a client written against vLLM sees no difference; /version and the
// server's logs say what is really serving.
func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	now := time.Now().Unix()
	var root *string
	if s.opts.ModelRoot != "" {
		root = strp(s.opts.ModelRoot)
	}
	cards := make([]modelCard, 0, len(s.opts.ServedModelNames))
	for _, name := range s.opts.ServedModelNames {
		cards = append(cards, modelCard{ID: name, Object: "model", Created: now, OwnedBy: "vllm", Root: root,
			MaxModelLen: s.opts.MaxModelLen, Permission: []modelPermission{{
				ID: "modelperm-" + randomHex(), Object: "model_permission", Created: now,
				AllowSampling: true, AllowLogprobs: true, AllowView: true, Organization: "*",
			}}})
	}
	writeJSON(w, http.StatusOK, struct {
		Object string      `json:"object"`
		Data   []modelCard `json:"data"`
	}{"list", cards})
}

// checkModel is vLLM's _check_model: an absent or empty model is the
// served one; another name is 404.
func (s *Server) checkModel(b *reqBody) *apiError {
	m, e := b.optString("model")
	if e != nil {
		return e
	}
	if m == nil || *m == "" || slices.Contains(s.opts.ServedModelNames, *m) {
		return nil
	}
	return notFound(fmt.Sprintf("The model `%s` does not exist.", *m))
}

// modelName is the name responses report.
func (s *Server) modelName() string { return s.opts.ServedModelNames[0] }

// randomHex is uuid4().hex's shape: 32 random hex digits.
func randomHex() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// requestID is vLLM's _base_request_id: the X-Request-Id header, else the
// body's request_id, else a random id.
func requestID(r *http.Request, fromBody string) string {
	if h := r.Header.Get("X-Request-Id"); h != "" {
		return h
	}
	if fromBody != "" {
		return fromBody
	}
	return randomHex()
}

// encode tokenizes a prompt text as vLLM's tokenizer.encode does, special
// tokens in the text recognised unless the tokenizer config says
// split_special_tokens.
func (s *Server) encode(text string, addSpecial bool) []int {
	parse := s.tok.Config == nil || !s.tok.Config.SplitSpecialTokens
	return s.tok.EncodeWith(text, tokenizer.EncodeOptions{AddSpecial: addSpecial, ParseSpecial: parse})
}
