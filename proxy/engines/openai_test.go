package engines

import (
	"testing"

	"github.com/ttftlens/ttftlens/endreason"
)

// Chunks below are shaped after what the servers actually send (trimmed ids
// and fingerprints kept, so the parser sees the real key layout).
const (
	openaiRole    = `{"id":"chatcmpl-9xYz","object":"chat.completion.chunk","created":1718000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}`
	openaiContent = `{"id":"chatcmpl-9xYz","object":"chat.completion.chunk","created":1718000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}]}`
	openaiFinish  = `{"id":"chatcmpl-9xYz","object":"chat.completion.chunk","created":1718000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`
	openaiUsage   = `{"id":"chatcmpl-9xYz","object":"chat.completion.chunk","created":1718000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`
	openaiNoUsage = `{"id":"chatcmpl-9xYz","object":"chat.completion.chunk","created":1718000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":" world"},"finish_reason":null}],"usage":null}`

	vllmRole     = `{"id":"chatcmpl-b8a1c6f2","object":"chat.completion.chunk","created":1718000001,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`
	vllmContent  = `{"id":"chatcmpl-b8a1c6f2","object":"chat.completion.chunk","created":1718000001,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" The"},"logprobs":null,"finish_reason":null}]}`
	vllmFinish   = `{"id":"chatcmpl-b8a1c6f2","object":"chat.completion.chunk","created":1718000001,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"length","stop_reason":null}]}`
	vllmStopTok  = `{"id":"chatcmpl-b8a1c6f2","object":"chat.completion.chunk","created":1718000001,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":128009}]}`
	vllmStopStr  = `{"id":"chatcmpl-b8a1c6f2","object":"chat.completion.chunk","created":1718000001,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":"</answer>"}]}`
	vllmUsage    = `{"id":"chatcmpl-b8a1c6f2","object":"chat.completion.chunk","created":1718000001,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[],"usage":{"prompt_tokens":27,"total_tokens":155,"completion_tokens":128}}`
	vllmAbort    = `{"id":"cmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":""},"finish_reason":"abort"}]}`
	vllmReason   = `{"id":"chatcmpl-r1","object":"chat.completion.chunk","created":1,"model":"deepseek-ai/DeepSeek-R1-Distill-Qwen-7B","choices":[{"index":0,"delta":{"reasoning_content":"Okay, let me think"},"logprobs":null,"finish_reason":null}]}`
	vllmReason2  = `{"id":"chatcmpl-r1","object":"chat.completion.chunk","created":1,"model":"gpt-oss-20b","choices":[{"index":0,"delta":{"reasoning":"hmm","content":null},"finish_reason":null}]}`
	vllmReasonNo = `{"id":"chatcmpl-r1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":"","content":null},"finish_reason":null}]}`
	// The chunk where the reasoning ends and the answer begins may carry both.
	vllmReasonToAnswer = `{"id":"chatcmpl-r1","object":"chat.completion.chunk","created":1,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"reasoning":"done.","content":"The"},"logprobs":null,"finish_reason":null}]}`
	deepseekReason     = `{"id":"d1","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"First,"},"logprobs":null,"finish_reason":null}]}`
	deepseekAnswer     = `{"id":"d1","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"9.8","reasoning_content":null},"logprobs":null,"finish_reason":null}]}`
	deepseekUsage      = `{"id":"d1","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":13,"completion_tokens":412,"total_tokens":425,"completion_tokens_details":{"reasoning_tokens":398}}}`
	llamacppReason     = `{"choices":[{"finish_reason":null,"index":0,"delta":{"reasoning_content":" the"}}],"created":1718000002,"id":"chatcmpl-Qx3","model":"m.gguf","system_fingerprint":"b9554-d403f00","object":"chat.completion.chunk","timings":{"cache_n":7,"prompt_n":10,"prompt_ms":251.51,"predicted_n":19,"predicted_ms":271.89,"draft_n":20,"draft_n_accepted":8}}`
	wholeReasonAnswer  = `{"id":"chatcmpl-W","object":"chat.completion","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"message":{"role":"assistant","content":"9.8 is greater.","reasoning_content":"Compare the tenths."},"finish_reason":"stop"}]}`
	wholeReasonOnly    = `{"id":"chatcmpl-W","object":"chat.completion","created":1,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"message":{"role":"assistant","content":null,"reasoning":"Let me count"},"finish_reason":"length"}]}`
	reasonThenAnswer2  = `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"reasoning_content":"a"}},{"index":1,"delta":{"content":"b"}}]}`

	llamacppFinal   = `{"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1718000002,"id":"chatcmpl-Qx3","model":"gpt-3.5-turbo","system_fingerprint":"b4567-abcdef0","object":"chat.completion.chunk","usage":{"completion_tokens":16,"prompt_tokens":9,"total_tokens":25},"timings":{"prompt_n":9,"prompt_ms":12.345,"prompt_per_token_ms":1.371,"prompt_per_second":729.0,"predicted_n":16,"predicted_ms":210.5,"predicted_per_token_ms":13.15,"predicted_per_second":76.0}}`
	llamacppContent = `{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"Hi"}}],"created":1718000002,"id":"chatcmpl-Qx3","model":"gpt-3.5-turbo","system_fingerprint":"b4567-abcdef0","object":"chat.completion.chunk","timings":{"prompt_n":9,"prompt_ms":12.3,"predicted_n":1,"predicted_ms":13.1}}`

	completionText   = `{"id":"cmpl-7","object":"text_completion","created":1718000003,"model":"gpt-3.5-turbo-instruct","choices":[{"text":" once upon","index":0,"logprobs":null,"finish_reason":null}]}`
	completionEmpty  = `{"id":"cmpl-7","object":"text_completion","created":1718000003,"model":"gpt-3.5-turbo-instruct","choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}]}`
	completionWhole  = `{"id":"cmpl-7","object":"text_completion","created":1718000003,"model":"gpt-3.5-turbo-instruct","choices":[{"text":"\n\nThis is a test.","index":0,"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}`
	toolCallFirst    = `{"id":"chatcmpl-T","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_abc","type":"function","function":{"name":"get_weather","arguments":""}}],"refusal":null},"logprobs":null,"finish_reason":null}]}`
	toolCallArgs     = `{"id":"chatcmpl-T","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"loc"}}]},"logprobs":null,"finish_reason":null}]}`
	toolCallFinish   = `{"id":"chatcmpl-T","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]}`
	toolCallsEmpty   = `{"id":"chatcmpl-T","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[]},"finish_reason":null}]}`
	wholeChat        = `{"id":"chatcmpl-W","object":"chat.completion","created":1718000004,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help?","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":8,"completion_tokens":9,"total_tokens":17},"service_tier":"default"}`
	wholeChatTools   = `{"id":"chatcmpl-W","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":50,"completion_tokens":15,"total_tokens":65}}`
	wholeChatEmpty   = `{"id":"chatcmpl-W","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":0,"total_tokens":3}}`
	wholeChatFilter  = `{"id":"chatcmpl-W","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null},"finish_reason":"content_filter"}]}`
	multiChoice      = `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"},{"index":1,"delta":{"content":"x"},"finish_reason":null}]}`
	openaiError      = `{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`
	vllmError        = `{"object":"error","message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError","param":null,"code":400,"error":{"message":"x","type":"BadRequestError","code":400}}`
	tgiError         = `{"error":"Input validation error: inputs must have less than 4096 tokens","error_type":"validation"}`
	tgiErrorGen      = `{"error":"Request failed during generation: Server error: CUDA out of memory","error_type":"generation"}`
	errorNull        = `{"id":"c","choices":[{"index":0,"delta":{"content":"a"}}],"error":null}`
	escapedContent   = `{"choices":[{"index":0,"delta":{"content":"\u00e9\n\"q\""}}]}`
	nullChoices      = `{"id":"c","choices":null,"usage":{"prompt_tokens":1,"completion_tokens":2}}`
	weirdTypes       = `{"choices":[{"delta":{"content":5,"tool_calls":{}},"text":7,"finish_reason":3}],"usage":"lots"}`
	choicesNotArray  = `{"choices":{"delta":{"content":"x"}}}`
	deltaNull        = `{"choices":[{"index":0,"delta":null,"finish_reason":"stop"}]}`
	usageFloatTokens = `{"choices":[],"usage":{"completion_tokens":"3"}}`
)

func TestOpenAIInspect(t *testing.T) {
	type ev = Event
	tests := []struct {
		name string
		data string
		want Event
	}{
		// OpenAI.
		{"openai role-only first chunk", openaiRole, ev{}},
		{"openai content", openaiContent, ev{Content: true}},
		{"openai finish", openaiFinish, ev{Finish: endreason.FinishStop}},
		{"openai usage chunk", openaiUsage, ev{Usage: true, PromptTokens: 12, CompletionTokens: 34}},
		{"openai usage null", openaiNoUsage, ev{Content: true}},
		{"openai error object", openaiError, ev{Error: true}},
		{"error null is no error", errorNull, ev{Content: true}},

		// vLLM.
		{"vllm role-only", vllmRole, ev{}},
		{"vllm content", vllmContent, ev{Content: true}},
		{"vllm finish length, stop_reason null", vllmFinish, ev{Finish: endreason.FinishLength}},
		{"vllm stop_reason token id", vllmStopTok, ev{Finish: endreason.FinishStop}},
		{"vllm stop_reason string", vllmStopStr, ev{Finish: endreason.FinishStop}},
		{"vllm usage, choices []", vllmUsage, ev{Usage: true, PromptTokens: 27, CompletionTokens: 128}},
		{"vllm abort", vllmAbort, ev{Finish: endreason.FinishAbort}},
		{"vllm reasoning_content", vllmReason, ev{Content: true, Reasoning: true}},
		{"reasoning (gpt-oss field)", vllmReason2, ev{Content: true, Reasoning: true}},
		{"empty reasoning is not content", vllmReasonNo, ev{}},
		{"reasoning and content in one delta: answer", vllmReasonToAnswer, ev{Content: true}},

		// DeepSeek's API: reasoning_content, then content; the usage counts
		// the reasoning tokens (read by the engine readers, not Inspect).
		{"deepseek reasoning", deepseekReason, ev{Content: true, Reasoning: true}},
		{"deepseek answer", deepseekAnswer, ev{Content: true}},
		{"deepseek usage", deepseekUsage, ev{Finish: endreason.FinishStop, Usage: true, PromptTokens: 13, CompletionTokens: 412}},
		{"vllm error with object error", vllmError, ev{Error: true}},

		// llama.cpp.
		{"llama.cpp final with timings", llamacppFinal, ev{Finish: endreason.FinishStop, Usage: true, PromptTokens: 9, CompletionTokens: 16}},
		{"llama.cpp content with timings", llamacppContent, ev{Content: true}},
		{"llama.cpp reasoning with timings", llamacppReason, ev{Content: true, Reasoning: true}},

		// Completions.
		{"completions text", completionText, ev{Content: true}},
		{"completions empty text, length", completionEmpty, ev{Finish: endreason.FinishLength}},
		{"completions whole body", completionWhole, ev{Content: true, Finish: endreason.FinishStop, Usage: true, PromptTokens: 5, CompletionTokens: 7}},

		// Tool calls.
		{"tool_calls first delta", toolCallFirst, ev{Content: true}},
		{"tool_calls arguments delta", toolCallArgs, ev{Content: true}},
		{"tool_calls finish", toolCallFinish, ev{Finish: endreason.FinishToolCalls}},
		{"tool_calls empty array", toolCallsEmpty, ev{}},

		// Non-streamed bodies.
		{"chat.completion", wholeChat, ev{Content: true, Finish: endreason.FinishStop, Usage: true, PromptTokens: 8, CompletionTokens: 9}},
		{"chat.completion tool calls", wholeChatTools, ev{Content: true, Finish: endreason.FinishToolCalls, Usage: true, PromptTokens: 50, CompletionTokens: 15}},
		{"chat.completion empty", wholeChatEmpty, ev{Finish: endreason.FinishLength, Usage: true, PromptTokens: 3}},
		{"chat.completion content_filter", wholeChatFilter, ev{Finish: endreason.FinishContentFilter}},
		{"two choices: content in the second", multiChoice, ev{Content: true, Finish: endreason.FinishStop}},
		{"two choices: reasoning, then answer", reasonThenAnswer2, ev{Content: true}},
		{"chat.completion with reasoning and answer", wholeReasonAnswer, ev{Content: true, Finish: endreason.FinishStop}},
		{"chat.completion cut while reasoning", wholeReasonOnly, ev{Content: true, Reasoning: true, Finish: endreason.FinishLength}},

		// TGI.
		{"tgi validation error", tgiError, ev{Error: true}},
		{"tgi generation error", tgiErrorGen, ev{Error: true}},

		// End marker.
		{"done", "[DONE]", ev{Done: true}},
		{"done with spaces", "  [DONE] ", ev{Done: true}},
		{"done with tabs and newline", "\t[DONE]\r\n", ev{Done: true}},
		{"done lower case is not done", "[done]", ev{Malformed: true}},
		{"done inside text", "[DONE]x", ev{Malformed: true}},
		{"json with surrounding spaces", "  " + openaiContent + "\n", ev{Content: true}},

		// Odd but valid shapes.
		{"escaped content", escapedContent, ev{Content: true}},
		{"choices null", nullChoices, ev{Usage: true, PromptTokens: 1, CompletionTokens: 2}},
		{"wrong types", weirdTypes, ev{}},
		{"choices not an array", choicesNotArray, ev{}},
		{"delta null", deltaNull, ev{Finish: endreason.FinishStop}},
		{"usage with a string token count", usageFloatTokens, ev{Usage: true}},
		{"empty object", `{}`, ev{}},

		// Not the protocol.
		{"empty", "", ev{Malformed: true}},
		{"spaces only", "   ", ev{Malformed: true}},
		{"invalid json", `{"choices":[`, ev{Malformed: true}},
		{"trailing garbage", `{"a":1}}`, ev{Malformed: true}},
		{"array", `[{"choices":[]}]`, ev{Malformed: true}},
		{"string", `"hello"`, ev{Malformed: true}},
		{"number", `42`, ev{Malformed: true}},
		{"null", `null`, ev{Malformed: true}},
		{"true", `true`, ev{Malformed: true}},
		{"invalid utf8 in a string", "{\"choices\":[{\"delta\":{\"content\":\"\xff\xfe\"}}]}", ev{Malformed: true, BadUTF8: true}},
		{"truncated utf8", "{\"choices\":[{\"delta\":{\"content\":\"\xe2\x82\"}}]}", ev{Malformed: true, BadUTF8: true}},
		{"invalid utf8 and invalid json", "\xc0\xaf", ev{Malformed: true, BadUTF8: true}},
	}
	var o OpenAI
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := o.Inspect([]byte(tc.data)); got != tc.want {
				t.Errorf("Inspect(%.80q)\n got %+v\nwant %+v", tc.data, got, tc.want)
			}
		})
	}
	// The same reader reused, in a different order, says the same: nothing
	// leaks from one event to the next.
	var o2 OpenAI
	for i := len(tests) - 1; i >= 0; i-- {
		tc := tests[i]
		if got := o2.Inspect([]byte(tc.data)); got != tc.want {
			t.Errorf("reused reader, %s: got %+v want %+v", tc.name, got, tc.want)
		}
	}
}

// TestInspectDoesNotModifyInput: the proxy forwards the bytes it inspected,
// so Inspect must leave them as they were (the parser unescapes in place only
// in its own copy).
func TestInspectDoesNotModifyInput(t *testing.T) {
	var o OpenAI
	for _, s := range []string{escapedContent, toolCallArgs, tgiError, openaiUsage, "  [DONE] "} {
		b := []byte(s)
		o.Inspect(b)
		if string(b) != s {
			t.Errorf("Inspect modified its input:\n got %q\nwant %q", b, s)
		}
	}
}

func FuzzInspect(f *testing.F) {
	// Real chunk shapes, one per server family.
	for _, s := range []string{
		openaiRole, openaiContent, openaiFinish, openaiUsage, vllmStopTok, vllmUsage, vllmReason,
		llamacppFinal, completionText, toolCallArgs, wholeChat, openaiError, tgiError,
	} {
		f.Add([]byte(s))
	}
	// End marker and its near misses.
	f.Add([]byte(" [DONE] "))
	f.Add([]byte("[DONE"))
	// Not the protocol: invalid JSON, not an object, bad UTF-8, deep nesting.
	f.Add([]byte(`{"choices":[{"delta":{"content":"\ud800"}}]}`))
	f.Add([]byte("{\"choices\":[{\"text\":\"\xff\"}]}"))
	f.Add([]byte(`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`))
	f.Add([]byte(`{"usage":{"prompt_tokens":99999999999999999999999,"completion_tokens":-1}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		orig := string(data)
		var o OpenAI
		ev := o.Inspect(data)
		if string(data) != orig {
			t.Fatalf("Inspect modified its input %q", orig)
		}
		// Deterministic: again on the same reader, and on a fresh one after
		// the reader has seen something else.
		if ev2 := o.Inspect(data); ev2 != ev {
			t.Fatalf("Inspect(%q) not deterministic: %+v then %+v", orig, ev, ev2)
		}
		var o2 OpenAI
		o2.Inspect([]byte(wholeChat))
		if ev3 := o2.Inspect(data); ev3 != ev {
			t.Fatalf("Inspect(%q) depends on the reader's history: %+v vs %+v", orig, ev, ev3)
		}
		// Consistency of the flags.
		if ev.BadUTF8 && !ev.Malformed {
			t.Fatalf("Inspect(%q): BadUTF8 without Malformed", orig)
		}
		if ev.Malformed || ev.Done {
			rest := ev
			rest.Malformed, rest.BadUTF8, rest.Done = false, false, false
			if rest != (Event{}) || (ev.Malformed && ev.Done) {
				t.Fatalf("Inspect(%q): malformed or done event carries more: %+v", orig, ev)
			}
		}
		if ev.Finish > endreason.FinishOther {
			t.Fatalf("Inspect(%q): finish %d out of range", orig, ev.Finish)
		}
		if !ev.Usage && (ev.PromptTokens != 0 || ev.CompletionTokens != 0) {
			t.Fatalf("Inspect(%q): token counts without usage", orig)
		}
	})
}
