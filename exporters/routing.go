package exporters

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// PredictionBuckets cover a TTFT prediction's ratio to the measurement,
// predicted / measured past routing: 0.8 to 1.25 is within 20 %, the
// outer buckets a model that is far off (an engine that just slowed down,
// a queue that built since the scrape).
var PredictionBuckets = []float64{0.25, 0.5, 0.667, 0.8, 0.9, 1, 1.111, 1.25, 1.5, 2, 4}

// routingSeries are the series of how requests were routed: the TTFT
// predictions' ratio to the measurement and the probes past an SLO by
// upstream, and the prompt tokens the engines reported cached by policy.
type routingSeries struct {
	ratio     []prometheus.Observer   // by upstream index
	sloProbes [][2]prometheus.Counter // by upstream index: missed, met
	policies  map[string]int          // policy → index; LabelOther is len(MetricOptions.Policies)
	prompt    []prometheus.Counter    // by policy index
	cached    []prometheus.Counter    // by policy index
}

// register creates the series for upstreams (label values, by index) and
// policies (each followed by LabelOther), pre-created at zero, and
// registers them on reg.
func (s *routingSeries) register(reg prometheus.Registerer, upstreams, policies []string, classicOnly bool) {
	ratioVec := prometheus.NewHistogramVec(histOpts("ttft_prediction_ratio",
		"Per request routed with a TTFT prediction (a least_ttft pool), the predicted time to first token past routing over the measured one (queue to transport): 1 is exact, above 1 the first token came sooner than predicted.",
		PredictionBuckets, classicOnly), []string{"upstream"})
	promptVec := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ttftlens",
		Name: "cache_reported_prompt_tokens_total",
		Help: "Prompt tokens (upstream usage) of the requests whose engine reported how many it served from its prefix cache, by the routing policy of their pool: the denominator of the cache hit share."},
		[]string{"policy"})
	cachedVec := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ttftlens",
		Name: "cached_prompt_tokens_total",
		Help: "Prompt tokens the engines reported served from their prefix cache (usage.prompt_tokens_details.cached_tokens, llama.cpp cache_n, ...), by the routing policy of the request's pool."},
		[]string{"policy"})
	probesVec := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ttftlens",
		Name: "ttft_slo_probes_total",
		Help: "Requests a least_ttft pool sent past their TTFT SLO, which every prediction missed, as probes of models measured long ago rather than refused, by upstream and whether the first token came within the SLO (met=\"false\" too for one that came with none)."},
		[]string{"upstream", "met"})
	reg.MustRegister(ratioVec, probesVec, promptVec, cachedVec)
	for _, u := range upstreams {
		s.ratio = append(s.ratio, ratioVec.WithLabelValues(u))
		s.sloProbes = append(s.sloProbes, [2]prometheus.Counter{probesVec.WithLabelValues(u, "false"), probesVec.WithLabelValues(u, "true")})
	}
	s.policies = make(map[string]int, len(policies))
	for _, p := range append(policies, LabelOther) {
		if _, dup := s.policies[p]; dup {
			continue
		}
		s.policies[p] = len(s.prompt)
		s.prompt = append(s.prompt, promptVec.WithLabelValues(p))
		s.cached = append(s.cached, cachedVec.WithLabelValues(p))
	}
}

// observe counts r (at upstream index ui, bd its Breakdown).
func (s *routingSeries) observe(r *record.Record, ui int, bd *stages.Breakdown) {
	if r.Predicted && bd.OK {
		if measured := bd.TTFT - bd.Stages[stages.Gateway] - bd.Stages[stages.Route]; measured > 0 {
			s.ratio[ui].Observe(float64(r.PredictedPastRoute()) / float64(measured))
		}
	}
	// A least_ttft probe of a request with an SLO and a prediction was sent
	// past the SLO (gateway.Choice.PastSLO): with an SLO, the other probes
	// are a cold model's, which has no prediction.
	if r.Probe && r.Predicted && r.TTFTSLO > 0 {
		met := 0
		if bd.OK && bd.TTFT <= r.TTFTSLO {
			met = 1
		}
		s.sloProbes[ui][met].Inc()
	}
	if r.CachedReported && r.TokensIn > 0 {
		pi, ok := s.policies[r.Policy]
		if !ok {
			pi = s.policies[LabelOther]
		}
		s.prompt[pi].Add(float64(r.TokensIn))
		s.cached[pi].Add(float64(min(r.CachedTokens, r.TokensIn)))
	}
}
