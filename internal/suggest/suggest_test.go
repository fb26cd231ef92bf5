package suggest

import "testing"

func TestNearest(t *testing.T) {
	known := []string{"listen", "read-timeout", "write-timeout", "upstream", "c"}
	tests := []struct {
		got, want string
	}{
		{"listen", "listen"},
		{"lisen", "listen"},              // one deletion
		{"raed-timeout", "read-timeout"}, // a swap is two substitutions
		{"read-timeut", "read-timeout"},
		{"upstreams", "upstream"},
		{"write-timeouts", "write-timeout"},
		{"rite-timeout", "write-timeout"},
		{"timeout", ""}, // five edits from the nearest
		{"", ""},
		{"xyz", ""},
		{"x", ""}, // one edit from "c", but all of it
		{"cc", "c"},
	}
	for _, tt := range tests {
		if got := Nearest(tt.got, known); got != tt.want {
			t.Errorf("Nearest(%q) = %q, want %q", tt.got, got, tt.want)
		}
	}
	if got := Nearest("ab", []string{"ax", "ay"}); got != "ax" {
		t.Errorf("a tie: %q, want the first, ax", got)
	}
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"kitten", "sitting", 3},
		{"flaw", "lawn", 2},
		{"same", "same", 0},
	}
	for _, tt := range tests {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := editDistance(tt.b, tt.a); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d (symmetric)", tt.b, tt.a, got, tt.want)
		}
	}
}
