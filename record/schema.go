package record

// Field is the name of a field of a record's JSON form. The log line writes
// the fields in the order of Fields, leaving out those that do not apply to
// the request; GET /debug/requests/{id} serves the same fields but the log's
// framing (level, msg); the README's record table lists them in this order.
type Field string

// The fields, in the order of Fields.
const (
	FieldTime                     Field = "time"
	FieldLevel                    Field = "level"
	FieldMsg                      Field = "msg"
	FieldRequestID                Field = "request_id"
	FieldTraceID                  Field = "trace_id"
	FieldSpanID                   Field = "span_id"
	FieldParentSpanID             Field = "parent_span_id"
	FieldMethod                   Field = "method"
	FieldPath                     Field = "path"
	FieldModel                    Field = "model"
	FieldStream                   Field = "stream"
	FieldStatus                   Field = "status"
	FieldUpstream                 Field = "upstream"
	FieldKey                      Field = "key"
	FieldEndReason                Field = "end_reason"
	FieldEndDetail                Field = "end_detail"
	FieldPhase                    Field = "phase"
	FieldError                    Field = "error"
	FieldTTFT                     Field = "ttft_ms"
	FieldE2E                      Field = "e2e_ms"
	FieldStages                   Field = "stages_ms"
	FieldUpstreamUnsplit          Field = "upstream_unsplit"
	FieldEngineReportInconsistent Field = "engine_report_inconsistent"
	FieldEngine                   Field = "engine_ms"
	FieldEngineReport             Field = "engine_report"
	FieldEngineReportInferred     Field = "engine_report_inferred"
	FieldEngineWaiting            Field = "engine_waiting"
	FieldEngineRunning            Field = "engine_running"
	FieldTokensOut                Field = "tokens_out"
	FieldTokensIn                 Field = "tokens_in"
	FieldITL                      Field = "itl_ms"
	FieldStalls                   Field = "stalls"
	FieldEvents                   Field = "events"
	FieldResidencyMax             Field = "residency_max_ms"
	FieldTransportBlocked         Field = "transport_blocked_ms"
	FieldBuffering                Field = "buffering"
	FieldBytesIn                  Field = "bytes_in"
	FieldBytesOut                 Field = "bytes_out"
	FieldCancelToClose            Field = "cancel_to_close_ms"
	FieldTokensAfterCancel        Field = "tokens_after_cancel"
)

// Fields is every field of the JSON form, in the log line's order.
var Fields = [...]Field{
	FieldTime, FieldLevel, FieldMsg,
	FieldRequestID, FieldTraceID, FieldSpanID, FieldParentSpanID,
	FieldMethod, FieldPath, FieldModel, FieldStream, FieldStatus, FieldUpstream, FieldKey,
	FieldEndReason, FieldEndDetail, FieldPhase, FieldError,
	FieldTTFT, FieldE2E, FieldStages, FieldUpstreamUnsplit, FieldEngineReportInconsistent,
	FieldEngine, FieldEngineReport, FieldEngineReportInferred, FieldEngineWaiting, FieldEngineRunning,
	FieldTokensOut, FieldTokensIn, FieldITL, FieldStalls, FieldEvents,
	FieldResidencyMax, FieldTransportBlocked, FieldBuffering,
	FieldBytesIn, FieldBytesOut, FieldCancelToClose, FieldTokensAfterCancel,
}
