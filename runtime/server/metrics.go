package server

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lowbit-ai/lowbit/runtime/engine"
)

// /metrics carries vLLM's metric names (vllm/v1/metrics/loggers.py), with
// its labels model_name and engine ("0": one engine), so dashboards and
// scrapers written for vLLM read it unchanged. The scheduler's state is
// read from Engine.Stats at scrape time; the per-request histograms are
// observed here, where requests start and end.

// metrics holds the server's collectors.
type metrics struct {
	handler           http.Handler
	ttft, itl, tpot   prometheus.Observer
	e2e               prometheus.Observer
	promptTok, genTok prometheus.Observer
	success           *prometheus.CounterVec
	model             string
}

// buckets125 is vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to
// max.
func buckets125(maxValue int) []float64 {
	var out []float64
	for p := 1; ; p *= 10 {
		for _, m := range []int{1, 2, 5} {
			v := m * p
			if v > maxValue {
				return out
			}
			out = append(out, float64(v))
		}
		if p > maxValue {
			return out
		}
	}
}

var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
		7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
		7.5, 10.0, 20.0, 40.0, 80.0}
	latencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
		60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

func newMetrics(s *Server) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{model: s.modelName()}
	labels := prometheus.Labels{"model_name": m.model, "engine": "0"}
	hist := func(name, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
		reg.MustRegister(h)
		return h
	}
	m.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets)
	m.itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets)
	m.tpot = hist("vllm:time_per_output_token_seconds",
		"Histogram of time per output token in seconds.DEPRECATED: Use vllm:inter_token_latency_seconds instead.", itlBuckets)
	m.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", latencyBuckets)
	tokBuckets := buckets125(s.opts.MaxModelLen)
	m.promptTok = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokBuckets)
	m.genTok = hist("vllm:request_generation_tokens", "Number of generation tokens processed.", tokBuckets)
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total",
		Help: "Count of successfully processed requests.", ConstLabels: labels}, []string{"finished_reason"})
	for _, r := range []string{engine.FinishStop, engine.FinishLength, engine.FinishAbort} {
		m.success.WithLabelValues(r)
	}
	reg.MustRegister(m.success)
	reg.MustRegister(&statsCollector{s: s, labels: labels})
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return m
}

// finished records a choice that ended (not one that failed).
func (m *metrics) finished(c *choice, e2e time.Duration) {
	m.success.WithLabelValues(c.finish).Inc()
	m.e2e.Observe(e2e.Seconds())
	m.promptTok.Observe(float64(c.promptTokens))
	m.genTok.Observe(float64(len(c.tokens)))
}

// statsCollector reads Engine.Stats at scrape time.
type statsCollector struct {
	s      *Server
	labels prometheus.Labels
}

type statDesc struct {
	name, help string
	kind       prometheus.ValueType
	value      func(engine.Stats) float64
}

var statDescs = []statDesc{
	{"vllm:num_requests_running", "Number of requests in model execution batches.", prometheus.GaugeValue,
		func(st engine.Stats) float64 { return float64(st.Running) }},
	{"vllm:num_requests_waiting", "Number of requests waiting to be processed.", prometheus.GaugeValue,
		func(st engine.Stats) float64 { return float64(st.Waiting) }},
	{"vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", prometheus.GaugeValue,
		func(st engine.Stats) float64 {
			if st.KVBlocksTotal <= 0 {
				return 0
			}
			return float64(st.KVBlocksUsed) / float64(st.KVBlocksTotal)
		}},
	{"vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", prometheus.CounterValue,
		func(st engine.Stats) float64 { return float64(st.PrefixQueries) }},
	{"vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", prometheus.CounterValue,
		func(st engine.Stats) float64 { return float64(st.PrefixHits) }},
	{"vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", prometheus.CounterValue,
		func(st engine.Stats) float64 { return float64(st.Preemptions) }},
	{"vllm:prompt_tokens_total", "Number of prefill tokens processed.", prometheus.CounterValue,
		func(st engine.Stats) float64 { return float64(st.PromptTokens) }},
	{"vllm:generation_tokens_total", "Number of generation tokens processed.", prometheus.CounterValue,
		func(st engine.Stats) float64 { return float64(st.GenerationTokens) }},
}

func (c *statsCollector) desc(d statDesc) *prometheus.Desc {
	return prometheus.NewDesc(d.name, d.help, nil, c.labels)
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range statDescs {
		ch <- c.desc(d)
	}
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.opts.Engine.Stats()
	for _, d := range statDescs {
		ch <- prometheus.MustNewConstMetric(c.desc(d), d.kind, d.value(st))
	}
}
