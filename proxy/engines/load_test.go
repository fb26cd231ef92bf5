package engines

import (
	"strings"
	"testing"
)

func TestParseMetricsLoad(t *testing.T) {
	tests := []struct {
		name             string
		text             string
		waiting, running int64
		ok               bool
	}{
		{"vllm, two models", "# HELP vllm:num_requests_waiting x\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"a\"} 3.0\nvllm:num_requests_waiting{model_name=\"b\"} 2\nvllm:num_requests_running{model_name=\"a\"} 7\n", 5, 7, true},
		{"sglang", "sglang:num_queue_reqs{x=\"y\"} 4\nsglang:num_running_reqs 1\n", 4, 1, true},
		{"tgi", "tgi_queue_size 9\ntgi_batch_current_size 16\n", 9, 16, true},
		{"llama.cpp", "llamacpp:requests_deferred 2\nllamacpp:requests_processing 1\n", 2, 1, true},
		{"a longer name with the same prefix is not it", "vllm:num_requests_waiting_by_reason{reason=\"capacity\"} 99\n", 0, 0, false},
		{"labels with braces and spaces in values", "vllm:num_requests_waiting{model_name=\"a } b\"} 6\n", 6, 0, true},
		{"nothing known", "up 1\n", 0, 0, false},
		{"garbage and NaN", "vllm:num_requests_running NaN\nvllm:num_requests_running{\n", 0, 0, false},
		{"read up to a broken line", "tgi_queue_size 3\ntgi_batch_current_size{\n", 3, 0, true},
		{"negative is no count", "tgi_queue_size -1\n", 0, 0, false},
		{"a counter is no gauge", "# TYPE tgi_queue_size counter\ntgi_queue_size 4\n", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			em := ParseMetrics(strings.NewReader(tt.text))
			if em.Waiting != tt.waiting || em.Running != tt.running || em.Load != tt.ok {
				t.Errorf("got %d %d %v, want %d %d %v", em.Waiting, em.Running, em.Load, tt.waiting, tt.running, tt.ok)
			}
		})
	}
}

// TestParseMetricsFamilies: a body that is not Prometheus text reads as
// no metric family; one read up to where it breaks counts what it read.
func TestParseMetricsFamilies(t *testing.T) {
	tests := []struct {
		name, text string
		want       int
	}{
		{"an HTML page", "<!doctype html>\n<html><body>Not Found</body></html>\n", 0},
		{"JSON", `{"detail":"Not Found"}`, 0},
		{"empty", "", 0},
		{"two families", "# TYPE up gauge\nup 1\nvllm:num_requests_running 2\n", 2},
		{"read up to a broken line", "tgi_queue_size 3\ntgi_batch_current_size{\n", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseMetrics(strings.NewReader(tt.text)).Families; got != tt.want {
				t.Errorf("%d families, want %d", got, tt.want)
			}
		})
	}
}

// TestParseKVCacheUsage reads each engine's KV-cache usage gauge: a
// fraction, the largest over label sets, the newer vLLM name first.
func TestParseKVCacheUsage(t *testing.T) {
	tests := []struct {
		name string
		text string
		want float64
	}{
		{"vLLM, per engine core", "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\nvllm:kv_cache_usage_perc{engine=\"1\",model_name=\"m\"} 0.5\n", 0.5},
		{"vLLM before the rename", "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.125\n", 0.125},
		{"vLLM exporting both names: the new one", "vllm:gpu_cache_usage_perc 0.9\nvllm:kv_cache_usage_perc 0.3\n", 0.3},
		{"SGLang", "# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name=\"m\"} 0.75\n", 0.75},
		{"llama.cpp", "# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio 0.0625\n", 0.0625},
		{"TGI has none", "tgi_queue_size 1\ntgi_batch_current_max_tokens 4096\n", -1},
		{"over 1 is full", "sglang:token_usage 1.02\n", 1},
		{"NaN and negative are no usage", "vllm:kv_cache_usage_perc NaN\nvllm:gpu_cache_usage_perc -0.5\n", -1},
		{"a counter is no gauge", "# TYPE sglang:token_usage counter\nsglang:token_usage 0.5\n", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseMetrics(strings.NewReader(tt.text)).KVCacheUsage; got != tt.want {
				t.Errorf("KV-cache usage %v, want %v", got, tt.want)
			}
		})
	}
}

// TestParseCacheTokens reads the KV cache's size: vLLM's cache config
// labels (the smallest engine core's), else SGLang's pool.
func TestParseCacheTokens(t *testing.T) {
	tests := []struct {
		name string
		text string
		want int64
	}{
		{"vLLM", "# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\",enable_prefix_caching=\"True\",engine=\"0\",num_gpu_blocks=\"27198\"} 1.0\n", 16 * 27198},
		{"vLLM, per engine core: the smallest", "vllm:cache_config_info{block_size=\"16\",engine=\"0\",num_gpu_blocks=\"400\"} 1\nvllm:cache_config_info{block_size=\"16\",engine=\"1\",num_gpu_blocks=\"300\"} 1\n", 16 * 300},
		{"vLLM before its cache is sized", "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"None\"} 1\n", 0},
		{"vLLM, a nonsense size", "vllm:cache_config_info{block_size=\"-16\",num_gpu_blocks=\"100\"} 1\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"99999999999999\"} 1\n", 0},
		{"SGLang", "# TYPE sglang:max_total_num_tokens gauge\nsglang:max_total_num_tokens{model_name=\"m\"} 161721.0\n", 161721},
		{"vLLM's before SGLang's", "sglang:max_total_num_tokens 5\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"2\"} 1\n", 32},
		{"TGI and llama.cpp have none", "tgi_queue_size 1\nllamacpp:requests_processing 1\n", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseMetrics(strings.NewReader(tt.text)).CacheTokens; got != tt.want {
				t.Errorf("cache tokens %d, want %d", got, tt.want)
			}
		})
	}
}

// TestParseWaste reads the engines' counts of their work for clients that
// had left, each from the engine's own series.
func TestParseWaste(t *testing.T) {
	tests := []struct {
		name           string
		text           string
		tokens, aborts int64
	}{
		{"the reference engine: its own series, not vLLM's it also exports",
			"# TYPE ttftlens_engine_tokens_after_client_left_total counter\nttftlens_engine_tokens_after_client_left_total{model_name=\"m\"} 40\n" +
				"# TYPE ttftlens_engine_aborted_requests_total counter\nttftlens_engine_aborted_requests_total{model_name=\"m\"} 2\n" +
				"# TYPE vllm:request_success_total counter\nvllm:request_success_total{finished_reason=\"abort\",model_name=\"m\"} 3\n", 40, 2},
		{"vLLM: the abort finish reason, summed over engine cores",
			"# TYPE vllm:request_success_total counter\n" +
				"vllm:request_success_total{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"} 90\n" +
				"vllm:request_success_total{engine=\"0\",finished_reason=\"abort\",model_name=\"m\"} 4\n" +
				"vllm:request_success_total{engine=\"1\",finished_reason=\"abort\",model_name=\"m\"} 1\n", -1, 5},
		{"vLLM with no abort yet", "vllm:request_success_total{finished_reason=\"stop\"} 9\n", -1, -1},
		{"SGLang", "# TYPE sglang:num_aborted_requests_total counter\nsglang:num_aborted_requests_total{model_name=\"m\"} 7\n", -1, 7},
		{"untyped samples", "ttftlens_engine_tokens_after_client_left_total 12\n", 12, -1},
		{"a gauge is no counter", "# TYPE sglang:num_aborted_requests_total gauge\nsglang:num_aborted_requests_total 7\n", -1, -1},
		{"NaN and negative are no count", "ttftlens_engine_tokens_after_client_left_total NaN\nsglang:num_aborted_requests_total -2\n", -1, -1},
		{"TGI and llama.cpp say nothing of it", "tgi_queue_size 1\nllamacpp:requests_processing 1\n", -1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			em := ParseMetrics(strings.NewReader(tt.text))
			if em.TokensAfterClientLeft != tt.tokens || em.AbortedRequests != tt.aborts {
				t.Errorf("tokens after the client left %d, aborted %d; want %d, %d", em.TokensAfterClientLeft, em.AbortedRequests, tt.tokens, tt.aborts)
			}
		})
	}
}

func FuzzParseMetrics(f *testing.F) {
	f.Add("vllm:num_requests_waiting{model_name=\"a\"} 3\n")
	f.Add("tgi_queue_size 1e308\ntgi_batch_current_size -1\n")
	f.Add("sglang:token_usage 0.5\nllamacpp:kv_cache_usage_ratio 7\n")
	f.Add("vllm:request_success_total{finished_reason=\"abort\"} 1e300\nttftlens_engine_tokens_after_client_left_total 5\n")
	f.Fuzz(func(t *testing.T, text string) {
		em := ParseMetrics(strings.NewReader(text))
		if em.Waiting < 0 || em.Running < 0 || em.TokensAfterClientLeft < -1 || em.AbortedRequests < -1 || em.KVCacheUsage < -1 || em.KVCacheUsage > 1 {
			t.Fatalf("negative count %+v", em)
		}
	})
}
