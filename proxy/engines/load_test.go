package engines

import (
	"strings"
	"testing"
)

func TestParseLoad(t *testing.T) {
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
			w, r, ok := ParseLoad(strings.NewReader(tt.text))
			if w != tt.waiting || r != tt.running || ok != tt.ok {
				t.Errorf("got %d %d %v, want %d %d %v", w, r, ok, tt.waiting, tt.running, tt.ok)
			}
		})
	}
}

func FuzzParseLoad(f *testing.F) {
	f.Add("vllm:num_requests_waiting{model_name=\"a\"} 3\n")
	f.Add("tgi_queue_size 1e308\ntgi_batch_current_size -1\n")
	f.Fuzz(func(t *testing.T, text string) {
		w, r, _ := ParseLoad(strings.NewReader(text))
		if w < 0 || r < 0 {
			t.Fatalf("negative load %d %d", w, r)
		}
	})
}
