package server

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/lowbit-ai/lowbit/runtime"
	"github.com/lowbit-ai/lowbit/runtime/engine"
)

// genParams are the fields /v1/completions and /v1/chat/completions share:
// sampling, stopping, streaming and what to return.
type genParams struct {
	n                           int
	temperature, topP, minP     *float64
	topK, seed                  *int64
	stop                        []string
	stopTokenIDs                []int
	includeStop, ignoreEOS      bool
	minTokens                   int
	skipSpecial                 bool
	stream                      bool
	includeUsage, continuousUse bool
	returnTokenIDs              bool
	tokensAsIDs                 bool
	requestID                   string
	// logprobs is the number of top alternatives per generated token, nil
	// for none, -1 for the whole vocabulary; promptLogprobs likewise for
	// prompt positions.
	logprobs, promptLogprobs *int
	// logprobsParam names the field logprobs came from in errors
	// ("logprobs"; chat's top_logprobs is reported as logprobs too, as
	// vLLM does).
	logprobsParam string
}

// parseGenParams reads the shared fields. nNullable is chat's n: int|None.
func parseGenParams(b *reqBody, nNullable bool) (*genParams, *apiError) {
	p := &genParams{logprobsParam: "logprobs"}
	var e *apiError
	var n int64 = 1
	if nNullable {
		var np *int64
		if np, e = b.optInt("n"); e != nil {
			return nil, e
		}
		if np != nil {
			n = *np
		}
	} else if n, e = b.intField("n", 1); e != nil {
		return nil, e
	}
	p.n = int(max(min(n, math.MaxInt32), math.MinInt32))
	for _, f := range []struct {
		k   string
		dst **float64
	}{{"temperature", &p.temperature}, {"top_p", &p.topP}, {"min_p", &p.minP}} {
		if *f.dst, e = b.optFloat(f.k); e != nil {
			return nil, e
		}
	}
	if p.topK, e = b.optInt("top_k"); e != nil {
		return nil, e
	}
	if p.seed, e = b.optInt("seed"); e != nil {
		return nil, e
	}
	if p.stop, e = b.stopList(); e != nil {
		return nil, e
	}
	if v, ok := b.get("stop_token_ids"); ok {
		if p.stopTokenIDs, e = intList("stop_token_ids", v, false); e != nil {
			return nil, e
		}
	}
	if p.includeStop, e = b.boolField("include_stop_str_in_output", false, false); e != nil {
		return nil, e
	}
	if p.ignoreEOS, e = b.boolField("ignore_eos", false, false); e != nil {
		return nil, e
	}
	mt, e := b.intField("min_tokens", 0)
	if e != nil {
		return nil, e
	}
	p.minTokens = int(max(min(mt, math.MaxInt32), math.MinInt32))
	if p.skipSpecial, e = b.boolField("skip_special_tokens", true, false); e != nil {
		return nil, e
	}
	if p.stream, e = b.boolField("stream", false, true); e != nil {
		return nil, e
	}
	if v, ok := b.get("stream_options"); ok {
		so, isObj := v.(map[string]any)
		if !isObj {
			return nil, fieldErr("stream_options", "model_type",
				"Input should be a valid dictionary or instance of StreamOptions", v)
		}
		sb := &reqBody{m: so}
		if p.includeUsage, e = sb.boolField("include_usage", true, true); e != nil {
			return nil, e
		}
		if p.continuousUse, e = sb.boolField("continuous_usage_stats", false, true); e != nil {
			return nil, e
		}
		p.continuousUse = p.continuousUse && p.includeUsage
	}
	if p.returnTokenIDs, e = b.boolField("return_token_ids", false, true); e != nil {
		return nil, e
	}
	if p.tokensAsIDs, e = b.boolField("return_tokens_as_token_ids", false, true); e != nil {
		return nil, e
	}
	if rid, e := b.optString("request_id"); e != nil {
		return nil, e
	} else if rid != nil {
		p.requestID = *rid
	}
	if e := rejectUnsupported(b); e != nil {
		return nil, e
	}
	return p, nil
}

// rejectUnsupported answers 400 for request fields lowbit does not
// implement, rather than ignoring them and returning something vLLM would
// not. Neutral values (a penalty of 1.0 or 0.0, an empty list) are fine:
// vLLM's benchmark client always sends repetition_penalty 1.0.
func rejectUnsupported(b *reqBody) *apiError {
	neutral := map[string]float64{"repetition_penalty": 1, "presence_penalty": 0, "frequency_penalty": 0}
	for _, k := range []string{"repetition_penalty", "presence_penalty", "frequency_penalty"} {
		f, e := b.optFloat(k)
		if e != nil {
			return e
		}
		if f != nil && *f != neutral[k] {
			return badRequest(fmt.Sprintf("%s is not supported by this server (lowbit implements no sampling penalties).", k), k, *f)
		}
	}
	for _, k := range []string{"logit_bias", "allowed_token_ids", "bad_words", "logprob_token_ids",
		"structured_outputs", "prompt_embeds", "truncate_prompt_tokens", "guided_json", "guided_regex",
		"guided_choice", "guided_grammar"} {
		if b.truthy(k) {
			return badRequest(k+" is not supported by this server.", k, nil)
		}
	}
	if b.truthy("use_beam_search") {
		return badRequest("use_beam_search is not supported by this server.", "use_beam_search", nil)
	}
	if v, ok := b.get("response_format"); ok {
		if rf, isObj := v.(map[string]any); !isObj || rf["type"] != "text" {
			return badRequest("response_format other than {\"type\": \"text\"} is not supported by this server.", "response_format", nil)
		}
	}
	return nil
}

// checkLogprobsFields is vLLM's check_logprobs "before" validator for the
// integer logprob fields (prompt_logprobs and logprobs, or top_logprobs):
// non-numbers, negatives other than -1, and prompt_logprobs with stream
// are rejected before anything else is looked at.
func checkLogprobsFields(b *reqBody, sampleField string) *apiError {
	for _, k := range []string{"prompt_logprobs", sampleField} {
		if v, ok := b.get(k); ok {
			switch v.(type) {
			case string, []any, map[string]any:
				return modelValidatorError(fmt.Sprintf("`%s` must be an integer.", k), k, v, len(b.m))
			}
		}
	}
	if v, ok := b.get("prompt_logprobs"); ok {
		f, _, _ := toFloat(v)
		if b.truthy("stream") && (f > 0 || f == -1) {
			return modelValidatorError("`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs", nil, len(b.m))
		}
		if f < 0 && f != -1 {
			return modelValidatorError("`prompt_logprobs` must be a positive value or -1.", "prompt_logprobs", v, len(b.m))
		}
	}
	if v, ok := b.get(sampleField); ok {
		f, _, _ := toFloat(v)
		if f < 0 && f != -1 {
			return modelValidatorError(fmt.Sprintf("`%s` must be a positive value or -1.", sampleField), sampleField, v, len(b.m))
		}
	}
	if b.truthy("stream_options") && !b.truthy("stream") {
		return modelValidatorError("Stream options can only be defined when `stream=True`.", "stream_options", nil, len(b.m))
	}
	return nil
}

// sampling resolves a request's sampling options against the server
// defaults (request value, then the generation config's, then OpenAI's),
// and validates them as vLLM's SamplingParams does.
func (s *Server) sampling(p *genParams) (runtime.SamplingOptions, *apiError) {
	o := s.defaults
	if p.temperature != nil {
		o.Temperature = *p.temperature
	}
	if p.topP != nil {
		o.TopP = *p.topP
	}
	if p.minP != nil {
		o.MinP = *p.minP
	}
	topK := int64(o.TopK)
	if p.topK != nil {
		topK = *p.topK
	}
	t := o.Temperature
	switch {
	case math.IsNaN(t) || math.IsInf(t, 0):
		return o, badRequest(fmt.Sprintf("temperature must be a finite number, got %s.", pyStr(t)), "temperature", t)
	case t < 0:
		return o, badRequest(fmt.Sprintf("temperature must be non-negative, got %s.", pyStr(t)), "temperature", t)
	case !(o.TopP > 0 && o.TopP <= 1) && (p.topP != nil || o.TopP != 0):
		return o, badRequest(fmt.Sprintf("top_p must be in (0, 1], got %s.", pyStr(o.TopP)), "top_p", o.TopP)
	case topK < -1:
		return o, plainBadRequest(fmt.Sprintf("top_k must be 0 (disable), or at least 1, got %d.", topK))
	case !(o.MinP >= 0 && o.MinP <= 1):
		return o, plainBadRequest(fmt.Sprintf("min_p must be in [0, 1], got %s.", pyStr(o.MinP)))
	}
	// vLLM raises tiny positive temperatures to 0.01 (they would overflow
	// its float32 division); only 0 is greedy.
	if t > 0 && t < 0.01 {
		s.log.Warn("temperature is less than 0.01, which may cause numerical errors nan or inf in tensors; raised to 0.01", "temperature", t)
		o.Temperature = 0.01
	}
	if topK <= 0 {
		topK = 0
	}
	o.TopK = int(min(topK, math.MaxInt32))
	if o.TopP == 1 {
		o.TopP = 0 // runtime: 0 or 1 both disable it
	}
	if o.Temperature < 1e-5 {
		o = runtime.SamplingOptions{} // greedy: vLLM resets the filters
	}
	return o, nil
}

// seedFor is the sampling seed of choice i: the request's seed plus i, as
// vLLM's ParentRequest gives child i of an n>1 request, or a random one.
// seed -1 means none, as in vLLM.
func seedFor(seed *int64, i int) uint64 {
	if seed == nil || *seed == -1 {
		return rand.Uint64()
	}
	return uint64(*seed) + uint64(i)
}

// checkCounts validates n, max_tokens and min_tokens as SamplingParams
// does. greedy is temperature 0.
func checkCounts(p *genParams, maxTokens int, maxTokensParam string, greedy bool) *apiError {
	switch {
	case p.n < 1:
		return badRequest(fmt.Sprintf("n must be at least 1, got %d.", p.n), "n", p.n)
	case maxTokens < 1:
		return badRequest(fmt.Sprintf("max_tokens must be at least 1, got %d.", maxTokens), maxTokensParam, maxTokens)
	case p.minTokens < 0:
		return plainBadRequest(fmt.Sprintf("min_tokens must be greater than or equal to 0, got %d.", p.minTokens))
	case p.minTokens > maxTokens:
		return plainBadRequest(fmt.Sprintf("min_tokens must be less than or equal to max_tokens=%d, got %d.", maxTokens, p.minTokens))
	case slices.Contains(p.stop, ""):
		return plainBadRequest("stop cannot contain an empty string.")
	case greedy && p.n > 1:
		return plainBadRequest(fmt.Sprintf("n must be 1 when using greedy sampling, got %d.", p.n))
	}
	return nil
}

// checkLogprobCaps is vLLM's _validate_logprobs: -1 counts as the whole
// vocabulary, and either count above the server's max_logprobs is a 400.
func (s *Server) checkLogprobCaps(p *genParams) *apiError {
	limit := s.maxLogprobs
	if p.logprobs != nil && *p.logprobs != 0 {
		k := *p.logprobs
		if k == -1 {
			k = s.vocab
		}
		if k > limit {
			return badRequest(fmt.Sprintf("Requested sample logprobs of %d, which is greater than max allowed: %d", k, limit), p.logprobsParam, k)
		}
	}
	if p.promptLogprobs != nil && *p.promptLogprobs != 0 {
		k := *p.promptLogprobs
		if k == -1 {
			k = s.vocab
		}
		if k > limit {
			return badRequest(fmt.Sprintf("Requested prompt logprobs of %d, which is greater than max allowed: %d", k, limit), "prompt_logprobs", k)
		}
	}
	for _, id := range p.stopTokenIDs {
		if id < 0 || id >= s.vocab {
			return badRequest(fmt.Sprintf("stop_token_ids contain out-of-vocab token id %d; the vocabulary size is %d.", id, s.vocab), "stop_token_ids", id)
		}
	}
	return nil
}

// checkLength is vLLM's TokenizeParams check: max_tokens above the model
// length, then a prompt longer than the model length minus max_tokens.
// outTokens is the requested output count (0 when unset).
func (s *Server) checkLength(promptLen, outTokens int, outParam string) *apiError {
	L := s.opts.MaxModelLen
	if outTokens > L {
		return badRequest(fmt.Sprintf("%s=%d cannot be greater than max_model_len=max_total_tokens=%d. Please request fewer output tokens.",
			outParam, outTokens, L), outParam, outTokens)
	}
	if promptLen > L-outTokens {
		return badRequest(fmt.Sprintf("You passed %d input tokens and requested %d output tokens. However, the model's context length is only %d tokens, resulting in a maximum input length of %d tokens. Please reduce the length of the input prompt.",
			promptLen, outTokens, L, L-outTokens), "input_tokens", promptLen)
	}
	return nil
}

// checkPromptIDs rejects empty prompts and ids outside the vocabulary.
func (s *Server) checkPromptIDs(ids []int) *apiError {
	if len(ids) == 0 {
		return plainBadRequest("The decoder prompt cannot be empty")
	}
	for _, id := range ids {
		if id < 0 || id >= s.vocab {
			return badRequest(fmt.Sprintf("Token id %d is out of vocabulary", id), "prompt_token_ids", id)
		}
	}
	return nil
}

// engineRequest builds choice i's request. The stop ids are the request's
// stop_token_ids and, unless ignore_eos, the EOS ids.
func (s *Server) engineRequest(id string, prompt []int, maxTokens int, p *genParams, samp runtime.SamplingOptions, i int, promptLogprobs bool) *engine.Request {
	samp.Seed = seedFor(p.seed, i)
	stops := slices.Clone(p.stopTokenIDs)
	if !p.ignoreEOS {
		for _, e := range s.eos {
			if !slices.Contains(stops, e) {
				stops = append(stops, e)
			}
		}
	}
	r := &engine.Request{
		ID:             fmt.Sprintf("%s-%d", id, i),
		Prompt:         prompt,
		MaxTokens:      maxTokens,
		MinTokens:      p.minTokens,
		Sampling:       samp,
		StopTokenIDs:   stops,
		PromptLogprobs: -1,
		Logprobs:       -1,
	}
	if p.logprobs != nil {
		r.Logprobs = s.topK(*p.logprobs)
	}
	if promptLogprobs && p.promptLogprobs != nil {
		r.PromptLogprobs = s.topK(*p.promptLogprobs)
	}
	return r
}

// topK turns a requested count (-1: all) into the engine's k.
func (s *Server) topK(k int) int {
	if k < 0 {
		return s.vocab
	}
	return k
}
