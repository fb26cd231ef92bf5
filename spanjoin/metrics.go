package spanjoin

import "github.com/prometheus/client_golang/prometheus"

var (
	descSpans = prometheus.NewDesc("ttftlens_engine_spans_total",
		"Engine request spans received over OTLP, by what became of them: joined (to its waiting or ending record), late (its record was already written), unmatched (no record of the proxy's within the wait).",
		[]string{"result"}, nil)
	descHeld = prometheus.NewDesc("ttftlens_engine_span_records_held_total",
		"Records that waited for their engine's request span after the client had its response.", nil, nil)
	descWaiting = prometheus.NewDesc("ttftlens_engine_span_records_waiting",
		"Records waiting for their engine's request span now.", nil, nil)
	descMissing = prometheus.NewDesc("ttftlens_engine_span_records_missing_total",
		"Records written unsplit without the engine span they waited for, by engine_span_missing: wait (--receive-otlp-wait passed), full (too many waiting), shutdown.",
		[]string{"reason"}, nil)
)

var (
	spanResults  = [numSpanResults]string{"joined", "late", "unmatched"}
	missingNames = [numMissing]string{MissingWait, MissingFull, MissingShutdown}
)

// Describe implements prometheus.Collector.
func (j *Joiner) Describe(ch chan<- *prometheus.Desc) {
	ch <- descSpans
	ch <- descHeld
	ch <- descWaiting
	ch <- descMissing
}

// Collect implements prometheus.Collector.
func (j *Joiner) Collect(ch chan<- prometheus.Metric) {
	for i, name := range spanResults {
		ch <- prometheus.MustNewConstMetric(descSpans, prometheus.CounterValue, float64(j.c.spans[i].Load()), name)
	}
	ch <- prometheus.MustNewConstMetric(descHeld, prometheus.CounterValue, float64(j.c.held.Load()))
	ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(j.Waiting()))
	for i, name := range missingNames {
		ch <- prometheus.MustNewConstMetric(descMissing, prometheus.CounterValue, float64(j.c.missing[i].Load()), name)
	}
}
