// Package exporters turns finished request records (package record) into
// what operators read: one JSON log line per request (LogSink), Prometheus
// series (Metrics) and the admin endpoint that serves them (AdminHandler).
// The log line and the /debug/requests pages are written from one table of
// the record's fields (fields.go), in record.Field order.
//
// Every sink honours the record.Sink contract: Emit is called once per
// request on the request's goroutine, never blocks on I/O, does not keep
// the record, and counts what it drops (ttftlens_records_dropped_total).
//
// Wiring, as the proxy does it:
//
//	reg := exporters.NewRegistry()
//	m := exporters.NewMetrics(reg, exporters.MetricOptions{Models: …, Upstreams: …})
//	logs := exporters.NewLogSink(os.Stdout, exporters.LogOptions{})
//	defer logs.Close()
//	sinks := exporters.NewFanout(exporters.Named{"log", logs}, exporters.Named{"metrics", m})
//	sinks.Track(m) // ttftlens_records_dropped_total{sink="log"|"metrics"}
//	admin := exporters.AdminHandler(reg, nil) // serve on the admin listener
//	// per request: m.RequestStarted() at handler entry; at the end, on
//	// every path, m.RequestEnded() then sinks.Emit(rec) (last, so that a
//	// sink that panics skips nothing). What is refused before a record can
//	// exist: m.RequestRefused(why), m.ConnectionRefused(why).
//
// The log sink sorts the record's inter-token gaps in place
// (stages.Stream.Gaps); the metrics sink reads them in any order.
package exporters
