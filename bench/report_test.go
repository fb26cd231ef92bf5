package bench

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/stages"
)

// readmeRecord returns the record line the README shows, as one line.
func readmeRecord(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := bytes.Cut(b, []byte("```json\n{\"time\""))
	block, _, ok2 := bytes.Cut(rest, []byte("\n```"))
	if !ok || !ok2 {
		t.Fatal("README: no json block starting with a record")
	}
	return append([]byte(`{"time"`), bytes.ReplaceAll(block, []byte("\n"), nil)...)
}

// TestParseRecordReadmeLine reads the README's record the way report does:
// the example stays a real record (stages add up to its TTFT).
func TestParseRecordReadmeLine(t *testing.T) {
	r, err := ParseRecord(readmeRecord(t))
	if err != nil {
		t.Fatal(err)
	}
	if r.RequestID == "" || !r.HasTTFT || r.Stages[stages.Prefill] <= 0 || r.Engine["tokenize"] <= 0 ||
		r.EndReason != "length" || r.EndDetail != "finish_length" || r.TokensOut != 16 {
		t.Errorf("%+v", r)
	}
	var sum time.Duration
	for _, d := range r.Stages {
		sum += d
	}
	if (sum - r.TTFT).Abs() > 2*time.Microsecond {
		t.Errorf("stages add to %v, TTFT %v", sum, r.TTFT)
	}
}

// logLine writes a record line with the given TTFT split between prefill
// and one other stage.
func logLine(id, path, model, reason string, prefill, other time.Duration, stage string) string {
	if reason != "length" {
		return fmt.Sprintf(`{"msg":"request","request_id":%q,"path":%q,"model":%q,"end_reason":%q,"end_detail":"x","e2e_ms":5}`, id, path, model, reason)
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	return fmt.Sprintf(`{"msg":"request","request_id":%q,"path":%q,"model":%q,"end_reason":"length","end_detail":"finish_length","ttft_ms":%g,"e2e_ms":50,`+
		`"stages_ms":{"prefill":%g,%q:%g}}`, id, path, model, ms(prefill+other), ms(prefill), stage, ms(other))
}

func TestReport(t *testing.T) {
	var lines []string
	// 20 chat requests: 18 fast (prefill 10 ms), 2 slow with a 200 ms queue.
	for i := range 20 {
		other := time.Millisecond
		if i%10 == 3 {
			other = 200 * time.Millisecond
		}
		lines = append(lines, logLine(fmt.Sprint("c", i), "/v1/chat/completions", "m", "length", 10*time.Millisecond, other, "queue"))
	}
	// 5 completions, one that failed.
	for i := range 4 {
		lines = append(lines, logLine(fmt.Sprint("p", i), "/v1/completions", "m", "length", time.Duration(i+1)*10*time.Millisecond, 0, "queue"))
	}
	lines = append(lines, logLine("p9", "/v1/completions", "m", "worker_failure", 0, 0, ""))
	lines = append(lines, `{"level":"info","message":"ttftlens serving"}`, "not json", `{"msg":"request","request_id":"x"}`, "")
	recs, st, err := ReadLog(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	if st.Records != 25 || st.Other != 1 || st.Malformed != 2 {
		t.Fatalf("stats %+v", st)
	}
	groups := GroupRecords(recs)
	if len(groups) != 2 || groups[0].Path != "/v1/chat/completions" || len(groups[0].Records) != 20 {
		t.Fatalf("groups %+v", groups)
	}
	chat := Analyze(groups[0])
	if chat.WithTTFT != 20 || chat.StageP50[stages.Prefill] != 10*time.Millisecond || chat.TTFTP50 != 11*time.Millisecond ||
		chat.TTFTP95 != 210*time.Millisecond {
		t.Errorf("chat %+v", chat)
	}
	sr := chat.Slow
	if sr == nil || sr.N != 2 || sr.Dominant != stages.Queue || sr.Next != stages.Prefill || sr.MinTTFT != 210*time.Millisecond ||
		sr.DominantMean != 200*time.Millisecond || sr.Share[stages.Queue] < 0.95 || sr.RestShare[stages.Queue] > 0.1 {
		t.Errorf("slow %+v", sr)
	}
	comp := Analyze(groups[1])
	if comp.WithTTFT != 4 || len(comp.EndReasons) != 2 || comp.EndReasons[0].N != 4 || comp.EndReasons[1].Reason != "worker_failure" ||
		comp.EndReasons[1].Share != 0.2 || comp.Slow.N != 1 || comp.Slow.Dominant != stages.Prefill {
		t.Errorf("completions %+v", comp)
	}
	var b strings.Builder
	WriteReport(&b, recs, st)
	for _, want := range []string{"/v1/chat/completions  model m: 20 requests", "slowest 10% (2 requests, TTFT >= 210 ms): queue holds 95%", "worker_failure", "skipped 1 other log line and 2 malformed",
		"/v1/completions  model m: 5 requests", "slowest 10% (1 request, TTFT >= 40.0 ms)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestReportCounts: counts of one are singular, every other count plural.
func TestReportCounts(t *testing.T) {
	one := logLine("a", "/p", "m", "length", time.Millisecond, time.Millisecond, "queue")
	tests := []struct {
		name  string
		lines []string
		want  []string
		not   []string
	}{
		{"one record", []string{one},
			[]string{"1 request record\n", "model m: 1 request, 1 with a first token"},
			[]string{"1 requests", "1 request records"}},
		{"two records", []string{one, logLine("b", "/p", "m", "length", time.Millisecond, time.Millisecond, "queue")},
			[]string{"2 request records\n", "model m: 2 requests, 2 with a first token", "slowest 10% (1 request,"},
			[]string{"1 requests"}},
		{"skipped lines", []string{one, `{"message":"a"}`, `{"message":"b"}`, "x"},
			[]string{"1 request record (skipped 2 other log lines and 1 malformed)"}, nil},
		{"one skipped line", []string{one, `{"message":"a"}`},
			[]string{"1 request record (skipped 1 other log line and 0 malformed)"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, st, err := ReadLog(strings.NewReader(strings.Join(tt.lines, "\n")))
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			WriteReport(&b, recs, st)
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("report lacks %q:\n%s", w, b.String())
				}
			}
			for _, w := range tt.not {
				if strings.Contains(b.String(), w) {
					t.Errorf("report has %q:\n%s", w, b.String())
				}
			}
		})
	}
}

func FuzzReadLog(f *testing.F) {
	f.Add(string(readmeRecord(f)))
	f.Add(logLine("a", "/p", "m", "length", time.Millisecond, time.Millisecond, "queue") + "\n" + logLine("b", "/p", "", "deadline", 0, 0, ""))
	f.Add(`{"msg":"request","request_id":"a","end_reason":"stop","ttft_ms":1,"stages_ms":{"bogus":1}}`)
	f.Add(`{"request_id":"a","end_reason":"stop","ttft_ms":-1,"stages_ms":{"queue":-5}}`)
	f.Fuzz(func(t *testing.T, s string) {
		recs, st, err := ReadLog(strings.NewReader(s))
		if err != nil {
			return // a line over the limit
		}
		if st.Records != len(recs) || st.Records+st.Other+st.Malformed != st.Lines {
			t.Fatalf("stats %+v for %d records", st, len(recs))
		}
		for _, r := range recs {
			for _, d := range r.Stages {
				if d < 0 {
					t.Fatalf("negative stage in %+v", r)
				}
			}
		}
		for _, g := range GroupRecords(recs) {
			rep := Analyze(g)
			if rep.Slow != nil && (rep.Slow.N < 1 || rep.Slow.N > rep.WithTTFT) {
				t.Fatalf("slow %+v of %d", rep.Slow, rep.WithTTFT)
			}
		}
		WriteReport(&strings.Builder{}, recs, st)
	})
}
