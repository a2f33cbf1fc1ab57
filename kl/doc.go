// Package kl measures KL(BF16 || candidate) per token, offline with lowbit's
// runtime or online from two OpenAI-compatible servers' prompt_logprobs, and
// reports it with confidence intervals. Its math is pure Go in float64.
//
// It does not quantize and does not serve.
//
// # Offline
//
// Offline runs both checkpoints through the runtime (the kernels that
// serve), on the prompts as given (teacher forcing: every position after
// the first) or on the reference's own sampled continuations (the positions
// after the prompt), as LowBArena's KL probe does. At each position both
// rows of logits go through the model's Ops().LogSoftmax (float32, as a
// server computes prompt_logprobs) and FullKL sums p·(log p − log q) over
// the whole vocabulary in float64, renormalizing the float32 rows so that
// KL(x ‖ x) is exactly 0. The forward's per-layer hook gives each layer's
// residual stream, and the candidate's NMSE against the reference on the
// same tokens says which layers add the error (keep those in BF16). Beside
// the exact KL, each position also gets the three top-k estimates below, as
// a server answering prompt_logprobs=k would allow them, so an offline run
// shows how far an online probe would be off.
//
// # Online
//
// Online tokenizes each prompt once with the reference server's /tokenize,
// sends the same ids to both servers' /v1/completions with
// prompt_logprobs=k (max_tokens 1, temperature 0), and matches the dicts by
// token id. Per position a vLLM-compatible server returns the actual token
// (always) and the top k, with log-probabilities over the full vocabulary,
// which allows three estimators, reported side by side:
//
//   - Union+tail: KL over the union of both dicts plus one tail bucket per
//     side holding 1 − the listed mass; a token one side does not list has
//     probability 0 there, clamped to Eps = 1e-12 inside the log (the
//     public compare_kl_api.py convention). Bias: upward wherever the top-k
//     sets differ (a token at P's border that Q ranks k+1 is priced as if
//     Q gave it 1e-12), downward for the mass both tails lump together;
//     exact when k covers the vocabulary. On flat distributions it grows
//     with k, each extra listed token being one more chance of a mismatch.
//   - Lower bound: the smallest KL of any pair of distributions that
//     agree with both dicts, over the buckets of the tokens both list, the
//     tokens only P lists (G), the tokens only Q lists (H) and the rest.
//     G's unknown Q-mass is at most |G| times Q's smallest top-k
//     probability (an unlisted token ranks below Q's top k) and at most
//     what Q leaves unlisted; H's P-mass likewise. Any such bucketing is a
//     coarse-graining, so by the data-processing inequality the bound never
//     exceeds the true KL, and it is never below the KL of the common
//     tokens plus one bucket for everything else. It is loose when the
//     KL sits in the tails neither dict shows.
//   - Δ log-likelihood: log P(x_t) − log Q(x_t) of the actual tokens, which
//     every dict holds. Its mean is an unbiased estimate of the KL only when
//     the tokens are the reference's own samples (online --sample, at
//     temperature 1); on given text it is the cross-entropy gap of the two
//     models on that text, which can be negative. It is noisy per token.
//
// # Estimator error against k
//
// Measured with Offline's study on synth's tiny Qwen3 (BF16 reference;
// FP8_DYNAMIC candidate), the 22 builtin prompts cut to 64 tokens, 32
// sampled tokens each (positions: 704). Synthetic models are flat (the top
// 20 tokens hold 8% of P), unlike trained ones, so the second table scales
// both models' logits by 3 (sampling at temperature 1/3), which puts 96% of
// P in its top 20, as in a trained model. Mean estimate and relative bias
// of the mean; BENCHMARKS.md has the MAE, the NVFP4A16 candidate and
// teacher-forced runs.
//
//	flat (logit scale 1), exact KL 0.0882 nats/token:
//	k     P mass   union+tail        lower bound       Δ log-lik
//	1     0.028    0.0687 (−22%)     0.0091 (−90%)     0.0934 (+6.0%)
//	5     0.052    0.1129 (+28%)     0.0141 (−84%)
//	20    0.079    0.1392 (+58%)     0.0175 (−80%)
//	100   0.126    0.1850 (+110%)    0.0220 (−75%)
//	1000  0.248    0.2990 (+239%)    0.0306 (−65%)
//
//	peaked (logit scale 3), exact KL 0.6584 nats/token:
//	k     P mass   union+tail        lower bound       Δ log-lik
//	1     0.683    1.4292 (+117%)    0.2852 (−57%)     0.6977 (+6.0%)
//	5     0.885    1.4490 (+120%)    0.3730 (−43%)
//	20    0.958    1.0161 (+54%)     0.4448 (−32%)
//	100   0.987    0.7800 (+19%)     0.5017 (−24%)
//	1000  0.997    0.6818 (+3.6%)    0.5446 (−17%)
//
// Δ log-likelihood does not depend on k; its bias is within its sampling
// error (the KL's 95% interval is ±35% here). So at vLLM's default k = 20
// the truth lies between the lower bound and union+tail, which are a factor
// of 2.3 apart, and Δ on sampled text is the estimate to trust. These
// synthetic candidates are far from their reference (top-1 agreement 79%)
// compared with a real FP8 checkpoint, so the numbers show the estimators'
// behaviour, not a real model's: run lowbit kl --study on the real pair.
//
// # Reports
//
// Summarize gives the mean in nats per token with a 95% bootstrap interval
// (percentile method, 2000 resamples, seeded; whole prompts are resampled
// when there are at least 10, since positions within a prompt are
// correlated, else positions), percentiles (gonum/stat), top-1 agreement,
// the worst positions with their tokens and context, the per-layer NMSE,
// and optionally LowBArena's score estimate (Score): D = 0.79·drop +
// 0.21·42.8·KL and LowBScore = √(m·s/max(1, 1+L))·exp(−max(D, 0)/10) with
// its gates, from the KL and an accuracy drop, memory, speed and length
// ratios the user supplies. Reports print as text or JSON and draw a
// histogram (and the per-layer error) as PNG with gonum/plot.
package kl
