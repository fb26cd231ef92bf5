package bench

import (
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
)

func TestParseDist(t *testing.T) {
	tests := []struct {
		in      string
		want    Dist
		wantErr bool
	}{
		{"64", Dist{64, 64}, false},
		{" 0 ", Dist{0, 0}, false},
		{"64:256", Dist{64, 256}, false},
		{"8:8", Dist{8, 8}, false},
		{"256:64", Dist{}, true},
		{"", Dist{}, true},
		{"-1", Dist{}, true},
		{"1:", Dist{}, true},
		{":5", Dist{}, true},
		{"1:2:3", Dist{}, true},
		{"1e3", Dist{}, true},
		{"99999999999", Dist{}, true},
	}
	for _, tt := range tests {
		got, err := ParseDist(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseDist(%q) = %v, %v; want %v, err %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	d := Dist{3, 5}
	seen := map[int]bool{}
	for range 200 {
		n := d.Sample(r)
		if n < 3 || n > 5 {
			t.Fatalf("Sample %d outside 3..5", n)
		}
		seen[n] = true
	}
	if len(seen) != 3 {
		t.Errorf("Sample covered %v, want 3, 4 and 5", seen)
	}
}

func FuzzParseDist(f *testing.F) {
	for _, s := range []string{"64", "64:256", "0", "a:b", "5:1", " 7 : 9 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDist(s)
		if err != nil {
			return
		}
		if d.Min < 0 || d.Max < d.Min || d.Max > maxDistTokens {
			t.Fatalf("ParseDist(%q) = %v", s, d)
		}
		back, err := ParseDist(d.String())
		if err != nil || back != d {
			t.Fatalf("round trip %q -> %v -> %q -> %v, %v", s, d, d.String(), back, err)
		}
	})
}

func TestParseHeader(t *testing.T) {
	tests := []struct {
		in, key, val string
		wantErr      bool
	}{
		{"X-Ttftlens-Fault: queue_delay=200ms", "X-Ttftlens-Fault", "queue_delay=200ms", false},
		{"x-api-key:abc", "X-Api-Key", "abc", false},
		{"Authorization:  Bearer a:b:c ", "Authorization", "Bearer a:b:c", false},
		{"Empty:", "Empty", "", false},
		{"no colon", "", "", true},
		{": value", "", "", true},
		{"Bad Name: v", "", "", true},
		{"K: a\nb", "", "", true},
		{"K: a\x00", "", "", true},
		{"K: tab\tok", "K", "tab\tok", false},
	}
	for _, tt := range tests {
		k, v, err := ParseHeader(tt.in)
		if (err != nil) != tt.wantErr || k != tt.key || v != tt.val {
			t.Errorf("ParseHeader(%q) = %q, %q, %v; want %q, %q, err %v", tt.in, k, v, err, tt.key, tt.val, tt.wantErr)
		}
	}
	h := Headers(http.Header{})
	for _, s := range []string{"A: 1", "a: 2"} {
		if err := h.Set(s); err != nil {
			t.Fatal(err)
		}
	}
	if got := http.Header(h).Values("A"); len(got) != 2 {
		t.Errorf("repeated -H: %v, want both values", got)
	}
}

func FuzzParseHeader(f *testing.F) {
	for _, s := range []string{"K: v", "X-Ttftlens-Fault: buffered", ":", "a:b:c", "K:\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, v, err := ParseHeader(s)
		if err != nil {
			return
		}
		// What it accepts, net/http must be able to send.
		req, _ := http.NewRequest("GET", "http://127.0.0.1/", nil)
		req.Header.Set(k, v)
		var b strings.Builder
		if err := req.Header.Write(&b); err != nil {
			t.Fatalf("ParseHeader(%q) = %q, %q: not writable: %v", s, k, v, err)
		}
		if k == "" || strings.ContainsAny(k, " :\r\n") || strings.ContainsAny(v, "\r\n") {
			t.Fatalf("ParseHeader(%q) = %q, %q", s, k, v)
		}
	})
}

func TestReadPrompts(t *testing.T) {
	tests := []struct {
		name, in string
		want     int
		wantErr  string
	}{
		{"both kinds", `{"prompt": "hello"}` + "\n\n# comment\n" + `{"messages": [{"role": "user", "content": "hi"}]}` + "\n", 2, ""},
		{"crlf", "{\"prompt\": \"a\"}\r\n{\"prompt\": \"b\"}\r\n", 2, ""},
		{"empty", "\n\n", 0, "no prompt"},
		{"not json", `{"prompt": "a"}` + "\nnope\n", 0, "line 2"},
		{"both fields", `{"prompt": "a", "messages": [{"role": "user"}]}`, 0, "both"},
		{"neither", `{"text": "a"}`, 0, "want"},
		{"messages not array", `{"messages": "hi"}`, 0, "non-empty array"},
		{"messages empty", `{"messages": []}`, 0, "non-empty array"},
		{"message without role", `{"messages": [{"content": "hi"}]}`, 0, "role"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadPrompts(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(got) != tt.want {
				t.Fatalf("%d prompts, %v; want %d", len(got), err, tt.want)
			}
		})
	}
	ps, _ := ReadPrompts(strings.NewReader(`{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}]}`))
	if got := ps[0].completionText(); got != "be brief\nhi" {
		t.Errorf("completionText = %q", got)
	}
}

func FuzzReadPrompts(f *testing.F) {
	f.Add(`{"prompt": "hello"}` + "\n" + `{"messages": [{"role": "user", "content": "hi"}]}`)
	f.Add("# c\n\n{\"prompt\": \"\"}")
	f.Add(`{"messages": [{"role": 1}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ReadPrompts(strings.NewReader(s))
		if err != nil {
			return
		}
		if len(ps) == 0 {
			t.Fatal("no prompts and no error")
		}
		for _, p := range ps {
			_ = p.completionText()
		}
	})
}
