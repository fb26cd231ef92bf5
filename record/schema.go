package record

import "fmt"

// Field is a field of a record's JSON form. The fields' order is the
// constants' order: the log line writes them from Field(0) to NumFields-1,
// leaving out those that do not apply to the request; GET
// /debug/requests/{id} serves the same fields but the log's framing
// (level, msg); docs/record.md's record table lists them in this order.
type Field uint8

// The fields, in order.
const (
	FieldTime Field = iota
	FieldLevel
	FieldMsg
	FieldRequestID
	FieldTraceID
	FieldSpanID
	FieldParentSpanID
	FieldMethod
	FieldPath
	FieldModel
	FieldStream
	FieldStatus
	FieldUpstream
	FieldPolicy
	FieldUpstreamConn
	FieldEngineKind
	FieldKey
	FieldQuota
	FieldQuotaFallback
	FieldEndReason
	FieldEndDetail
	FieldPhase
	FieldError
	FieldTTFT
	FieldFirstAnswer
	FieldE2E
	FieldStages
	FieldUpstreamUnsplit
	FieldEngineReportInconsistent
	FieldEngine
	FieldEngineReport
	FieldEngineReportInferred
	FieldEngineSpanMissing
	FieldEngineWaiting
	FieldEngineRunning
	FieldTTFTSLO
	FieldSLOFallback
	FieldPredictedTTFT
	FieldPredictedStages
	FieldPredictionOff
	FieldPrefixAffinity
	FieldCachedExpected
	FieldProbe
	FieldPredictionInputs
	FieldTokensOut
	FieldTokensIn
	FieldCachedTokens
	FieldReasoningTokens
	FieldITL
	FieldStalls
	FieldEvents
	FieldResidencyMax
	FieldTransportBlocked
	FieldBuffering
	FieldBytesIn
	FieldBytesOut
	FieldCancelToClose
	FieldTokensAfterCancel
	NumFields
)

// fieldNames are the fields' JSON names.
var fieldNames = [NumFields]string{
	FieldTime:                     "time",
	FieldLevel:                    "level",
	FieldMsg:                      "msg",
	FieldRequestID:                "request_id",
	FieldTraceID:                  "trace_id",
	FieldSpanID:                   "span_id",
	FieldParentSpanID:             "parent_span_id",
	FieldMethod:                   "method",
	FieldPath:                     "path",
	FieldModel:                    "model",
	FieldStream:                   "stream",
	FieldStatus:                   "status",
	FieldUpstream:                 "upstream",
	FieldPolicy:                   "policy",
	FieldUpstreamConn:             "upstream_conn",
	FieldEngineKind:               "engine",
	FieldKey:                      "key",
	FieldQuota:                    "quota_ms",
	FieldQuotaFallback:            "quota_fallback",
	FieldEndReason:                "end_reason",
	FieldEndDetail:                "end_detail",
	FieldPhase:                    "phase",
	FieldError:                    "error",
	FieldTTFT:                     "ttft_ms",
	FieldFirstAnswer:              "first_answer_ms",
	FieldE2E:                      "e2e_ms",
	FieldStages:                   "stages_ms",
	FieldUpstreamUnsplit:          "upstream_unsplit",
	FieldEngineReportInconsistent: "engine_report_inconsistent",
	FieldEngine:                   "engine_ms",
	FieldEngineReport:             "engine_report",
	FieldEngineReportInferred:     "engine_report_inferred",
	FieldEngineSpanMissing:        "engine_span_missing",
	FieldEngineWaiting:            "engine_waiting",
	FieldEngineRunning:            "engine_running",
	FieldTTFTSLO:                  "ttft_slo_ms",
	FieldSLOFallback:              "ttft_slo_fallback",
	FieldPredictedTTFT:            "predicted_ttft_ms",
	FieldPredictedStages:          "predicted_stages_ms",
	FieldPredictionOff:            "prediction_off",
	FieldPrefixAffinity:           "prefix_affinity",
	FieldCachedExpected:           "cached_tokens_expected",
	FieldProbe:                    "probe",
	FieldPredictionInputs:         "prediction_inputs",
	FieldTokensOut:                "tokens_out",
	FieldTokensIn:                 "tokens_in",
	FieldCachedTokens:             "cached_tokens",
	FieldReasoningTokens:          "reasoning_tokens",
	FieldITL:                      "itl_ms",
	FieldStalls:                   "stalls",
	FieldEvents:                   "events",
	FieldResidencyMax:             "residency_max_ms",
	FieldTransportBlocked:         "transport_blocked_ms",
	FieldBuffering:                "buffering",
	FieldBytesIn:                  "bytes_in",
	FieldBytesOut:                 "bytes_out",
	FieldCancelToClose:            "cancel_to_close_ms",
	FieldTokensAfterCancel:        "tokens_after_cancel",
}

// String is the field's JSON name.
func (f Field) String() string {
	if f < NumFields {
		return fieldNames[f]
	}
	return "field?"
}

// UnmarshalText sets f to the field named text, so that a record's JSON
// form decodes into a map keyed by Field. A name that is not a field's is
// an error.
func (f *Field) UnmarshalText(text []byte) error {
	for g, name := range fieldNames {
		if name == string(text) {
			*f = Field(g)
			return nil
		}
	}
	return fmt.Errorf("record: no field named %q", text)
}
