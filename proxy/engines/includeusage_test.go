package engines

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

func TestEnsureIncludeUsage(t *testing.T) {
	tests := []struct {
		name, in, out string
		added         bool
		err           error
	}{
		{"absent", `{"model":"m","stream":true,"messages":[]}`,
			`{"stream_options":{"include_usage":true},"model":"m","stream":true,"messages":[]}`, true, nil},
		{"absent, spaces kept", "{ \"stream\" : true ,\n \"n\": 1.50e2 }",
			"{\"stream_options\":{\"include_usage\":true}, \"stream\" : true ,\n \"n\": 1.50e2 }", true, nil},
		{"empty options", `{"stream":true,"stream_options":{}}`,
			`{"stream":true,"stream_options":{"include_usage":true}}`, true, nil},
		{"options without include_usage", `{"stream":true,"stream_options":{"continuous_usage_stats":true}}`,
			`{"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`, true, nil},
		{"include_usage false", `{"stream":true,"stream_options":{"include_usage":false,"x":1}}`,
			`{"stream":true,"stream_options":{"include_usage":true,"x":1}}`, true, nil},
		{"include_usage null", `{"stream_options":{"include_usage" : null},"stream":true}`,
			`{"stream_options":{"include_usage" : true},"stream":true}`, true, nil},
		{"options null", `{"stream":true,"stream_options":null}`,
			`{"stream":true,"stream_options":{"include_usage":true}}`, true, nil},
		{"already true", `{"stream":true,"stream_options":{"include_usage":true}}`,
			`{"stream":true,"stream_options":{"include_usage":true}}`, false, nil},
		{"escaped keys", `{"stre\u0061m":true,"stream_optio\u006es":{"include\u005fusage":true}}`,
			`{"stre\u0061m":true,"stream_optio\u006es":{"include\u005fusage":true}}`, false, nil},
		{"not streamed", `{"model":"m","stream":false}`, `{"model":"m","stream":false}`, false, nil},
		{"stream absent", `{"model":"m"}`, `{"model":"m"}`, false, nil},
		{"stream as a string", `{"stream":"true"}`, `{"stream":"true"}`, false, nil},
		{"duplicate stream: the last wins", `{"stream":false,"stream":true}`,
			`{"stream_options":{"include_usage":true},"stream":false,"stream":true}`, true, nil},
		{"duplicate stream_options: all updated", `{"stream":true,"stream_options":{"include_usage":true},"stream_options":{}}`,
			`{"stream":true,"stream_options":{"include_usage":true},"stream_options":{"include_usage":true}}`, true, nil},
		{"nested look-alikes untouched", `{"messages":[{"content":"\"stream_options\":{}"}],"metadata":{"stream_options":1},"stream":true}`,
			`{"stream_options":{"include_usage":true},"messages":[{"content":"\"stream_options\":{}"}],"metadata":{"stream_options":1},"stream":true}`, true, nil},
		{"unicode and escapes kept", `{"stream":true,"messages":[{"content":"é \u00e9 \ud83d\ude00 \u0007 \/"}]}`,
			`{"stream_options":{"include_usage":true},"stream":true,"messages":[{"content":"é \u00e9 \ud83d\ude00 \u0007 \/"}]}`, true, nil},
		{"options a string", `{"stream":true,"stream_options":"yes"}`, `{"stream":true,"stream_options":"yes"}`, false, ErrStreamOptionsInvalid},
		{"not an object", `[{"stream":true}]`, `[{"stream":true}]`, false, ErrBodyNotObject},
		{"not JSON", `{"stream":true`, `{"stream":true`, false, ErrBodyNotJSON},
		{"empty", ``, ``, false, ErrBodyNotJSON},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			out, added, err := EnsureIncludeUsage(in, nil)
			if string(out) != tc.out || added != tc.added || err != tc.err {
				t.Errorf("EnsureIncludeUsage(%s)\n got %s %v %v\nwant %s %v %v", tc.in, out, added, err, tc.out, tc.added, tc.err)
			}
			if string(in) != tc.in {
				t.Errorf("input modified")
			}
			if !added && len(out) > 0 && &out[0] != &in[0] {
				t.Errorf("not added, but out is not body")
			}
		})
	}
	// dst is appended to.
	buf := make([]byte, 0, 256)
	out, _, _ := EnsureIncludeUsage([]byte(`{"stream":true}`), buf)
	if &out[:1][0] != &buf[:1][0] {
		t.Errorf("dst's storage not reused")
	}
	out, _, _ = EnsureIncludeUsage([]byte(`{"stream":true}`), []byte("prefix:"))
	if string(out) != `prefix:{"stream_options":{"include_usage":true},"stream":true}` {
		t.Errorf("not appended to dst: %s", out)
	}
}

func TestIsUsageOnlyChunk(t *testing.T) {
	for _, tc := range []struct {
		data string
		want bool
	}{
		{vllmUsage, true},
		{openaiUsage, true},
		{openaiContent, false},
		{openaiNoUsage, false},
		{nullChoices, false},
		{`{"usage":{"prompt_tokens":1}}`, false},
		{`{"choices":[],"usage":null}`, false},
		{`{"choices":[]}`, false},
		{"[DONE]", false},
		{`{"choices":[`, false},
	} {
		if got := IsUsageOnlyChunk([]byte(tc.data)); got != tc.want {
			t.Errorf("IsUsageOnlyChunk(%.60s) = %v, want %v", tc.data, got, tc.want)
		}
		// The readers say the same in Event.UsageOnly.
		var r VLLMReader
		if got := r.Event([]byte(tc.data), nil).UsageOnly; got != tc.want {
			t.Errorf("Event(%.60s).UsageOnly = %v, want %v", tc.data, got, tc.want)
		}
	}
}

func FuzzEnsureIncludeUsage(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"stream":true,"stream_options":{"continuous_usage_stats":true}}`,
		`{"stream":true,"stream_options":{"include_usage":false}}`,
		`{"stream":true,"stream_options":null}`,
		`{"stream":true,"stream_options":{"include_usage":true}}`,
		`{"stream":false,"stream":true,"stream_options":{},"stream_options":{"include_usage":0}}`,
		`{"stre\u0061m":true,"stream_optio\u006es":{"include\u005fusage":1}}`,
		`{"stream":true,"x":"\u0007\ud800\/","n":-0.0e+00}`,
		`{}`, `[]`, `{"stream":true,"stream_options":[]}`, ` { "stream" : true } `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		orig := string(body)
		out, added, err := EnsureIncludeUsage(body, nil)
		if string(body) != orig {
			t.Fatal("input modified")
		}
		if !added {
			if string(out) != orig {
				t.Fatalf("not added but changed: %q -> %q", orig, out)
			}
		}
		if err != nil {
			if added || json.Valid(body) && err == ErrBodyNotJSON {
				t.Fatalf("%q: err %v, added %v", orig, err, added)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("%q: invalid JSON accepted", orig)
		}
		var in map[string]any
		if json.Unmarshal(body, &in) != nil {
			t.Fatalf("%q: valid JSON but not an object, no error", orig)
		}
		if in["stream"] != true {
			if added {
				t.Fatalf("%q: added to a non-streamed request", orig)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("%q -> %q: invalid JSON", orig, out)
		}
		var got map[string]any
		dec := json.NewDecoder(bytes.NewReader(out))
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("%q -> %q: %v", orig, out, err)
		}
		so, ok := got["stream_options"].(map[string]any)
		if !ok || so["include_usage"] != true {
			t.Fatalf("%q -> %q: include_usage not true", orig, out)
		}
		// Every original member kept, stream_options' others too.
		for k, v := range in {
			if k == "stream_options" {
				if m, ok := v.(map[string]any); ok {
					for k2, v2 := range m {
						if k2 != "include_usage" && !reflect.DeepEqual(so[k2], v2) {
							t.Fatalf("%q -> %q: stream_options.%s changed", orig, out, k2)
						}
					}
				}
				continue
			}
			if !reflect.DeepEqual(got[k], v) {
				t.Fatalf("%q -> %q: member %q changed", orig, out, k)
			}
		}
		if len(got) != len(in) && !(len(got) == len(in)+1 && in["stream_options"] == nil) {
			t.Fatalf("%q -> %q: members added or lost", orig, out)
		}
		// Idempotent: a second pass adds nothing.
		if out2, added2, err2 := EnsureIncludeUsage(out, nil); added2 || err2 != nil || !bytes.Equal(out2, out) {
			t.Fatalf("%q: second pass changed %q -> %q (%v)", orig, out, out2, err2)
		}
	})
}
