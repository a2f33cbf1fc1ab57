// Package server is lowbit's OpenAI-compatible HTTP API, written to be
// indistinguishable from `vllm serve` for a client or an evaluation harness
// built against vLLM: the same endpoints, request fields and defaults,
// response shapes (key order and float formatting included), SSE framing,
// error objects and messages, and Prometheus metric names.
//
// # Endpoints
//
//   - GET /health: 200 with an empty body; 503 once the engine is closed.
//   - GET /v1/models: vLLM's ModelList, one card per served model name
//     (harnesses read data[0].id), with max_model_len.
//   - GET /version: {"version": Options.Version}.
//   - GET /metrics: Prometheus text with vLLM's names (vllm:…).
//   - POST /tokenize, /detokenize: vLLM's shapes, prompt or messages.
//   - POST /v1/completions: prompt as text, texts, ids or lists of ids; n;
//     echo; logprobs; prompt_logprobs (the KL probe's input); stream.
//   - POST /v1/chat/completions: messages rendered with the model's chat
//     template; logprobs/top_logprobs; prompt_logprobs; stream.
//
// Fields lowbit does not implement (sampling penalties other than the
// neutral values, logit_bias, guided decoding, beam search, tool-call
// parsing) are refused with a 400 naming them rather than ignored.
//
// # Wiring it up
//
// The engine is anything with Submit and Stats (the Engine interface,
// which runtime/engine's implementation satisfies). From a model
// directory:
//
//	opts, err := server.OptionsFromModelDir(modelDir, "", "auto")
//	// handle err
//	opts.Engine = eng                        // an engine over the same model
//	opts.MaxModelLen = engineCfg.MaxModelLen // the engine's, if smaller than the model's
//	opts.ServedModelNames = []string{name}   // vLLM's default is the path as given
//	opts.Version = version
//	srv, err := server.New(opts)
//	// handle err
//	hs := &http.Server{Addr: addr, Handler: srv}
//	go hs.ListenAndServe()
//	// on shutdown:
//	hs.Shutdown(ctx) // drain in-flight requests
//	srv.Close()      // cancel what is left; /health answers 503
//
// "auto" applies the model's generation_config.json to requests that omit
// sampling fields, as vLLM's default --generation-config auto does (Qwen3:
// temperature 0.6, top_k 20, top_p 0.95); "vllm" uses vLLM's own defaults
// (temperature 1, no filters).
//
// # Semantics worth knowing
//
// A request with n choices over P prompts becomes P×n engine requests;
// choice i of a prompt samples with seed+i when the request sets a seed
// (vLLM's ParentRequest), else with a random seed. Text is detokenized
// incrementally (never splitting a UTF-8 character); stop strings are
// matched on the text as vLLM matches them (first stop string in list
// order, searched in the newly added characters, excluded unless
// include_stop_str_in_output), and a stream holds back the last
// len(longest stop)-1 characters until they cannot start one. When a stop
// string ends a choice, or the client disconnects, the engine request's
// context is cancelled at once. echo with max_tokens 0 runs the engine for
// one token and returns only the prompt, as vLLM does (so usage reports
// one completion token, as vLLM's does).
//
// Log-probabilities follow vLLM's dict semantics: per position the actual
// token first with its true rank, then the top k with ranks 1..k;
// prompt_logprobs is null for the first prompt token; -inf is written
// -9999.0. A decoded token that is a fragment of a multi-byte character is
// corrected from up to four preceding tokens, or "" while incomplete.
//
// Errors are {"error": {"message", "type", "param", "code"}} with code the
// HTTP status. A full engine queue is 503; a client that disconnects
// cancels its engine requests; an engine error in a stream is an SSE error
// event followed by data: [DONE].
package server
