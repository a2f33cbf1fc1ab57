// Package kl measures KL(BF16 || candidate) per token, offline with lowbit's
// runtime or online from two OpenAI-compatible servers' prompt_logprobs, and
// reports it with confidence intervals. Its math is pure Go in float64.
//
// It does not quantize and does not serve.
package kl
