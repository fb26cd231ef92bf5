// Package exporters turns finished request records (package record) into
// what operators read: one JSON log line per request (LogSink), Prometheus
// series (Metrics) and the admin endpoint that serves them (AdminHandler).
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
//	sinks.Track(m)
//	admin := exporters.AdminHandler(reg, nil)
//	// per request: m.RequestStarted(); …; sinks.Emit(rec); m.RequestEnded()
package exporters
