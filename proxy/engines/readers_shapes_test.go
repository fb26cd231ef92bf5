package engines

import "io"

var _ io.Reader = (*loopReader)(nil)

// Typical events of each engine, as the transcripts of testdata show them.
const (
	refContent            = `{"id":"chatcmpl-7f3a9c2e1b","object":"chat.completion.chunk","created":1718000000,"model":"ttftlens-ref","choices":[{"index":0,"delta":{"content":"Once"},"logprobs":null,"finish_reason":null}]}`
	vllmUsageMetrics      = `{"id":"chatcmpl-b8a1c6f2e4d94f0b","object":"chat.completion.chunk","created":1718000001,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[],"usage":{"prompt_tokens":27,"total_tokens":31,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":16}},"metrics":{"queue_time_ms":4.25,"time_to_first_token_ms":37.5,"generation_time_ms":61.75,"mean_itl_ms":20.583,"tokens_per_second":49.2}}`
	ollamaContent         = `{"model":"llama3.2","created_at":"2024-06-10T06:13:21.000001Z","message":{"role":"assistant","content":" sky"},"done":false}`
	ollamaDone            = `{"model":"llama3.2","created_at":"2024-06-10T06:13:21.000009Z","message":{"role":"assistant","content":""},"done_reason":"stop","done":true,"total_duration":1587954833,"load_duration":1021167458,"prompt_eval_count":26,"prompt_eval_duration":312000000,"eval_count":5,"eval_duration":240500000}`
	sglangContent         = `{"text":" Paris is","output_ids":[100,101],"meta_info":{"id":"8f0c2d9e61a54b7c","finish_reason":null,"prompt_tokens":7,"weight_version":"default","completion_tokens":2,"cached_tokens":2,"queue_time":0.0125,"forward_entry_time":1718000003.25,"prefill_finished_time":1718000003.2875}}`
	sglangFinish          = `{"text":" Paris is the","output_ids":[100,101,102],"meta_info":{"id":"8f0c2d9e61a54b7c","finish_reason":{"type":"stop","matched":2},"prompt_tokens":7,"weight_version":"default","completion_tokens":3,"cached_tokens":2,"e2e_latency":0.1,"queue_time":0.0125,"forward_entry_time":1718000003.25,"prefill_finished_time":1718000003.2875}}`
	tgiContent            = `{"object":"chat.completion.chunk","id":"","created":1718000004,"model":"meta-llama/Meta-Llama-3-8B-Instruct","system_fingerprint":"2.4.1-sha-f1f98e3","choices":[{"index":0,"delta":{"role":"assistant","content":" there"},"logprobs":null,"finish_reason":null}],"usage":null}`
	tgiToken              = `{"index":2,"token":{"id":2,"text":" learning","logprob":-0.25,"special":false},"generated_text":null,"details":null}`
	anthropicDelta        = `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`
	anthropicMessageDelta = `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}`
)

// Typical events per reader: the content event on the hot path (every
// generated token), and the event that carries the engine's timing.
var readerEvents = []struct {
	kind, name, data string
}{
	{KindReference, "content", refContent},
	{KindVLLM, "content", vllmContent},
	{KindVLLM, "usage_metrics", vllmUsageMetrics},
	{KindLlamaCpp, "content", llamacppContent},
	{KindLlamaCpp, "final_timings", llamacppFinal},
	{KindOllama, "content", ollamaContent},
	{KindOllama, "done", ollamaDone},
	{KindSGLang, "content", sglangContent},
	{KindSGLang, "finish", sglangFinish},
	{KindTGI, "content", tgiContent},
	{KindTGI, "native_token", tgiToken},
	{KindAnthropic, "content", anthropicDelta},
	{KindAnthropic, "message_delta", anthropicMessageDelta},
	{KindGeneric, "content", openaiContent},
	// A reasoning model's events: its reasoning, and the usage that counts it.
	{KindVLLM, "reasoning", vllmReason2},
	{KindLlamaCpp, "reasoning_timings", llamacppReason},
	{KindOllama, "thinking", `{"model":"qwen3","created_at":"2025-05-29T09:35:56.012Z","message":{"role":"assistant","content":"","thinking":" the"},"done":false}`},
	{KindAnthropic, "thinking", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me"}}`},
	{KindGeneric, "usage_reasoning", deepseekUsage},
	// An engine not identified yet, whose response says which it is.
	{KindGeneric, "llamacpp_final_timings", llamacppFinal},
	{KindGeneric, "vllm_usage_metrics", vllmUsageMetrics},
	{KindGeneric, "ollama_done", ollamaDone},
}

// loopReader returns data over and over.
type loopReader struct {
	data []byte
	off  int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := copy(p, l.data[l.off:])
	l.off = (l.off + n) % len(l.data)
	return n, nil
}
