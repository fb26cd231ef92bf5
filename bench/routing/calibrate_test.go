package main

import (
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/bench"
)

func TestCapacity(t *testing.T) {
	sec := time.Second
	// ended returns a request that started at start and ended at end.
	ended := func(start, end time.Duration, how string) bench.Result {
		return bench.Result{Start: start, E2E: end - start, End: how}
	}
	tests := []struct {
		name     string
		results  []bench.Result
		from, to time.Duration
		want     float64
		wantErr  bool
	}{
		{"the completions in the window over its length", []bench.Result{
			ended(0, 2*sec, "done"), ended(0, 3*sec, "done"), ended(sec, 5*sec, "done"), ended(2*sec, 9*sec, "done"),
		}, 2 * sec, 6 * sec, 0.75, false},
		{"the start and the end left out", []bench.Result{
			ended(0, sec, "done"), ended(0, 4*sec, "done"), ended(3*sec, 6*sec, "done"), ended(5*sec, 7*sec, "done"),
		}, 2 * sec, 6 * sec, 0.25, false},
		{"failures and cancelled requests left out", []bench.Result{
			ended(0, 3*sec, "done"), ended(0, 4*sec, "http_503"), ended(sec, 6*sec, "cancelled"),
		}, 2 * sec, 6 * sec, 0.25, false},
		{"nothing completed in the window", []bench.Result{ended(0, sec, "done")}, 2 * sec, 6 * sec, 0, true},
		{"an empty window", []bench.Result{ended(0, sec, "done")}, 2 * sec, 2 * sec, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := capacity(&bench.Run{Results: tc.results}, tc.from, tc.to)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("capacity %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestArrivalRate(t *testing.T) {
	tests := []struct {
		capacity, load, want float64
		wantErr              bool
	}{
		{10, 0.9, 9, false},
		{4, 1.5, 6, false},
		{10, 0, 0, true},
		{10, -1, 0, true},
		{0, 0.9, 0, true},
	}
	for _, tc := range tests {
		got, err := arrivalRate(tc.capacity, tc.load)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("arrivalRate(%v, %v) = %v, %v; want %v, error %v", tc.capacity, tc.load, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestDefaultSLO(t *testing.T) {
	ms := time.Millisecond
	res := func(policy string, slowP50 time.Duration) policyResult {
		return policyResult{policy: policy, engineP50: []time.Duration{100 * ms, 100 * ms, slowP50}}
	}
	tests := []struct {
		name    string
		results []policyResult
		want    time.Duration
	}{
		{"least_ttft's slow engine", []policyResult{res("round_robin", 36*time.Second), res("least_ttft", 800*ms)}, 600 * ms},
		{"the first policy's when least_ttft did not run", []policyResult{res("round_robin", 2*time.Second)}, 1500 * ms},
		{"the first policy's when least_ttft sent the slow engine nothing", []policyResult{res("least_load", 2*time.Second), res("least_ttft", 0)}, 1500 * ms},
	}
	for _, tc := range tests {
		if got := defaultSLO(tc.results); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
