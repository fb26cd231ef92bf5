package gateway

import "github.com/prometheus/client_golang/prometheus"

// Collector exports the gateway's per-upstream state at scrape time:
// admission queue depth, requests in flight, health and ejection. Upstreams
// come from the current configuration, so a reload shows at the next scrape.
// With the redis quota backend it also counts what Redis could not do,
// and with share_routing the messages shared.
type Collector struct {
	gw    *Gateway
	label func(*Upstream) string // the upstream's name in records and metrics
}

// NewCollector returns a collector of gw's per-upstream state; label names
// each upstream as records and the other series do
// (proxy.Proxy.UpstreamLabel).
func NewCollector(gw *Gateway, label func(*Upstream) string) Collector {
	return Collector{gw: gw, label: label}
}

var (
	queueDepthDesc = prometheus.NewDesc("ttftlens_queue_depth", "Requests waiting in the upstream's admission queue.", []string{"upstream"}, nil)
	upInFlightDesc = prometheus.NewDesc("ttftlens_upstream_in_flight", "Requests holding one of the upstream's admission slots.", []string{"upstream"}, nil)
	upHealthyDesc  = prometheus.NewDesc("ttftlens_upstream_healthy", "1 when the upstream is healthy and not ejected.", []string{"upstream"}, nil)

	quotaFallbackDesc    = prometheus.NewDesc("ttftlens_quota_fallbacks_total", "Admissions this replica's own quota buckets decided because Redis failed or timed out (on_failure: open).", nil, nil)
	quotaUnavailableDesc = prometheus.NewDesc("ttftlens_quota_unavailable_total", "Admissions refused with 503 because Redis failed or timed out (on_failure: closed).", nil, nil)
	quotaLostDesc        = prometheus.NewDesc("ttftlens_quota_settlements_lost_total", "Quota settlements (refunds and extra charges after a response) Redis did not take: it failed, or the queue was full.", nil, nil)

	shareDesc = prometheus.NewDesc("ttftlens_routing_share_messages_total", "share_routing's messages by event: sent (this replica's messages published: routings, ends, observations, counts every 10 s), received (the other replicas' taken, unknown_upstream ones too), dropped (not published: the queue was full, or sharing stopped), failed (the messages of a publish to Redis that failed, some of which may have gone, and receives that failed), malformed (received, unreadable), unknown_upstream (received for an upstream no least_ttft pool here has).", []string{"event"}, nil)
)

func (c Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueDepthDesc
	ch <- upInFlightDesc
	ch <- upHealthyDesc
	ch <- quotaFallbackDesc
	ch <- quotaUnavailableDesc
	ch <- quotaLostDesc
	ch <- shareDesc
}

func (c Collector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.gw.Snapshot().Pools() {
		for _, u := range p.Upstreams {
			healthy := 0.0
			if u.Healthy() && !u.Ejected() {
				healthy = 1
			}
			name := c.label(u)
			ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(u.QueueDepth()), name)
			ch <- prometheus.MustNewConstMetric(upInFlightDesc, prometheus.GaugeValue, float64(u.InFlight()), name)
			ch <- prometheus.MustNewConstMetric(upHealthyDesc, prometheus.GaugeValue, healthy, name)
		}
	}
	if st := c.gw.quotaRedis(); st != nil {
		n := st.Stats()
		ch <- prometheus.MustNewConstMetric(quotaFallbackDesc, prometheus.CounterValue, float64(n.Fallbacks))
		ch <- prometheus.MustNewConstMetric(quotaUnavailableDesc, prometheus.CounterValue, float64(n.Unavailable))
		ch <- prometheus.MustNewConstMetric(quotaLostDesc, prometheus.CounterValue, float64(n.Lost))
	}
	if sh := c.gw.share.Load(); sh != nil {
		n := sh.Stats()
		for _, e := range []struct {
			event string
			n     uint64
		}{{"sent", n.Sent}, {"received", n.Received}, {"dropped", n.Dropped}, {"failed", n.Failed}, {"malformed", n.Malformed}, {"unknown_upstream", c.gw.shareUnknown.Load()}} {
			ch <- prometheus.MustNewConstMetric(shareDesc, prometheus.CounterValue, float64(e.n), e.event)
		}
	}
}
