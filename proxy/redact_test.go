package proxy

import "testing"

func TestRedact(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Authorization: Bearer abc.def-123", "Authorization: Bearer [redacted]"},
		{"authorization: bearer abc, next", "authorization: bearer [redacted], next"},
		{"Basic dXNlcjpwYXNz", "Basic [redacted]"},
		{"key sk-proj-AbC_123 revoked", "key sk-[redacted] revoked"},
		{`{"api_key":"s3cret","model":"m"}`, `{"api_key":"[redacted]","model":"m"}`},
		{`{"access_token": "s3cret"}`, `{"access_token": "[redacted]"}`},
		{"/v1?key=s3cret&x=1", "/v1?key=[redacted]&x=1"},
		{"X-Api-Key: s3cret", "X-Api-Key: [redacted]"},
		{"client_secret=s3cret; password: hunter2", "client_secret=[redacted]; password: [redacted]"},
		// Left alone: words that only look like the patterns.
		{"ask-me task-runner", "ask-me task-runner"},
		{"max_tokens is 4096 tokens", "max_tokens is 4096 tokens"},
		{"model not found", "model not found"},
		// Redacting twice changes nothing.
		{"Bearer [redacted] key=[redacted]", "Bearer [redacted] key=[redacted]"},
	}
	for _, tt := range tests {
		if got := redact(tt.in); got != tt.want {
			t.Errorf("redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
