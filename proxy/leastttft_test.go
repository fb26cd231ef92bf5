package proxy

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/refengine"
	"github.com/ttftlens/ttftlens/refengine/model"
	"github.com/ttftlens/ttftlens/stages"
)

// leastTTFTYAML is a least_ttft pool of three reference engines, and a
// pool of a fourth (spare, of policy SPARE_POLICY: the SLO's fallback).
const leastTTFTYAML = `
routes:
  - model: ttftlens-ref
    pool: p
    ttft_slo_fallback: spare
pools:
  - name: p
    upstreams: [UP_A, UP_B, UP_C]
    policy: least_ttft
  - name: spare
    upstreams: [UP_D]
    policy: SPARE_POLICY
`

// smallModel is a reference model a sixtieth of the default's work per
// token: prefills of a few milliseconds, so that these tests' few dozen
// requests per engine, under -race, take seconds, with slow_prefill's
// factors still far above the noise.
var smallModel = model.Config{Dim: 64, HiddenDim: 128, Layers: 2, Heads: 2, KVHeads: 2, Vocab: 4096, MaxSeq: 2048}

// ttftEngines starts four reference engines with the server-wide faults
// given (A to D) and the proxy in front of them (leastTTFTYAML, the
// fallback pool's policy fallback, "" for no fallback); it returns the
// engines, the proxy's address, its records and the pool's upstreams A,
// B, C.
func ttftEngines(t *testing.T, fallback string, faults ...string) ([]*refengine.Server, string, *captureSink, []*gateway.Upstream) {
	t.Helper()
	urls := map[string]string{}
	var engs []*refengine.Server
	for i, f := range faults {
		eng, url := startEngine(t, refengine.Config{Faults: f, ModelConfig: smallModel})
		engs = append(engs, eng)
		urls["UP_"+string(rune('A'+i))] = url
	}
	yaml := strings.ReplaceAll(leastTTFTYAML, "SPARE_POLICY", cmp.Or(fallback, gateway.PolicyLeastRequest))
	if fallback == "" {
		yaml = strings.ReplaceAll(yaml, "    ttft_slo_fallback: spare\n", "")
	}
	// The reference engine's kind: it is asked for its usage chunk, which
	// carries its cached prompt tokens.
	addr, sink, p := startGateway(t, yaml, urls, func(c *Config) { c.Engine = engines.KindReference })
	return engs, addr, sink, p.Gateway().Snapshot().Pools()[0].Upstreams
}

// uniquePrompt is a chat request whose prompt (about 400 tokens) shares no
// prefix with any other i's: no engine has it cached.
func uniquePrompt(i int) string {
	words := strings.Repeat(fmt.Sprintf("word%d ", i), 80)
	return `{"model":"ttftlens-ref","stream":true,"max_tokens":2,"messages":[{"role":"user","content":"` + fmt.Sprint(i) + " " + words + `"}]}`
}

// routeOne sends body through the proxy (with the header pairs hdr) and
// returns the response's status and body and the request's record.
func routeOne(t *testing.T, addr string, sink *captureSink, body string, hdr ...string) (*http.Response, string, gotRecord) {
	t.Helper()
	resp, out, err := post(t, addr, body, hdr...)
	if err != nil {
		t.Fatal(err)
	}
	return resp, out, sink.next(t)
}

// warm sends unique prompts until every upstream of ups has served one
// with a first token (its model has been observed: predictions can be
// compared), counting those named in served already, failing after 60.
// It returns the requests it sent.
func warm(t *testing.T, addr string, sink *captureSink, ups []*gateway.Upstream, served ...string) int {
	t.Helper()
	for i := range 60 {
		if !slices.ContainsFunc(ups, func(u *gateway.Upstream) bool { return !slices.Contains(served, u.Name) }) {
			return i
		}
		if _, _, r := routeOne(t, addr, sink, uniquePrompt(1000+i)); r.bd.OK {
			served = append(served, r.Upstream)
		}
	}
	t.Fatalf("after 60 requests, only %v served one", served)
	return 0
}

// TestLeastTTFTAvoidsSlowPrefill: of three engines, one with a prefill
// four times slower: once each has served a request (cold start: prefix
// affinity spreads them), least_ttft predicts the slow one's TTFT highest
// (past twice the soonest, where no new prompt is placed) and sends it
// nothing; every record carries the prediction, the policy and the
// engine's cached tokens, and its predicted stages are those of
// an engine that reports its split (prefill predicted, nothing
// unattributed beyond the network).
func TestLeastTTFTAvoidsSlowPrefill(t *testing.T) {
	_, addr, sink, ups := ttftEngines(t, "", "", "", "slow_prefill=4", "")
	n := warm(t, addr, sink, ups)
	t.Logf("all three upstreams observed after %d requests", n)
	for i := range 12 {
		resp, _, r := routeOne(t, addr, sink, uniquePrompt(i))
		if resp.StatusCode != 200 || !r.bd.OK {
			t.Fatalf("request %d: status %d, %s/%s", i, resp.StatusCode, r.Reason, r.Detail)
		}
		if r.Upstream == ups[2].Name {
			t.Fatalf("request %d went to the slow engine: predicted %v (%v), measured %v",
				i, r.Prediction, r.PredictionOff, r.bd.Stages)
		}
		// A new prompt may be placed by rendezvous hashing (the record
		// says prefix_affinity), among the upstreams predicted within twice
		// the soonest: never the slow one.
		if !r.Predicted || r.Policy != gateway.PolicyLeastTTFT || !r.CachedReported {
			t.Fatalf("request %d: predicted %v, policy %q, cached reported %v",
				i, r.Predicted, r.Policy, r.CachedReported)
		}
		if r.Prediction[stages.Prefill] <= 0 || r.Prediction[stages.Gateway] != 0 || r.Prediction[stages.Route] != 0 {
			t.Fatalf("request %d: predicted stages %v: want a prefill, nothing before the queue", i, r.Prediction)
		}
	}
}

// TestPredictionInputsRecorded: a least_ttft record says what the model
// was asked: the prompt's estimate, the load, and, on an upstream that
// served the prompt before, the prefix the index expects cached there.
func TestPredictionInputsRecorded(t *testing.T) {
	_, addr, sink, ups := ttftEngines(t, "", "", "", "", "")
	warm(t, addr, sink, ups)
	body := uniquePrompt(7)
	served := map[string]bool{}
	again := 0 // requests that went where the prompt was served before
	for i := range 4 {
		_, _, r := routeOne(t, addr, sink, body)
		if !r.bd.OK || !r.Inputs.Set || r.Inputs.PromptTokens < 100 || r.Inputs.InFlight != 0 {
			t.Fatalf("request %d: %s/%s, inputs %+v: want set, over 100 prompt tokens estimated, none in flight", i, r.Reason, r.Detail, r.Inputs)
		}
		if x := r.Inputs.PrefixTokens; served[r.Upstream] != (x > 0) || x > r.Inputs.PromptTokens {
			t.Fatalf("request %d to %s (served it before: %v): prefix tokens %d of %d", i, r.Upstream, served[r.Upstream], x, r.Inputs.PromptTokens)
		}
		if served[r.Upstream] {
			again++
		}
		served[r.Upstream] = true
	}
	if again == 0 {
		t.Fatalf("no request of the prompt went where it was served before: %v", served)
	}
}

// TestLeastTTFTFollowsSlowdown: the engine least_ttft prefers (the others
// have four times its prefill) slows down mid-run, its prefill sixteen
// times what it was. The requests that meet the slowdown teach its model
// (the first barely moves it: an outlier to a model that knows better),
// until its prediction passes the others': the slowed engine then gets
// none of ten requests in a row. (Its model weighs its old fast requests
// by their age, with a half-life of 2 s on the gateway's clock: requests of
// milliseconds, as here, take more of them than requests of seconds would
// before the old ones stop counting, and while it still mixes the two it
// may take one more now and then.) The first request that met the
// slowdown was predicted far too soon, and its record says prefill was the
// part furthest off.
func TestLeastTTFTFollowsSlowdown(t *testing.T) {
	engines, addr, sink, ups := ttftEngines(t, "", "", "slow_prefill=4", "slow_prefill=4", "")
	warm(t, addr, sink, ups)
	// A is the favourite: six requests in a row chosen by their prediction
	// go there. (A probe may go elsewhere first: an upstream whose
	// warm-up request came sooner than A's prediction then, on a loaded
	// machine, is probed again.)
	for i, byPrediction := 0, 0; byPrediction < 6; i++ {
		if i == 20 {
			t.Fatalf("20 requests before the slowdown, %d chosen by their prediction", byPrediction)
		}
		_, _, r := routeOne(t, addr, sink, uniquePrompt(i))
		if r.Probe {
			continue
		}
		if r.Upstream != ups[0].Name {
			t.Fatalf("before the slowdown, request %d went to %s by its prediction (%v), not the fastest", i, r.Upstream, r.Prediction)
		}
		byPrediction++
	}
	if err := engines[0].SetFaults("slow_prefill=16"); err != nil {
		t.Fatal(err)
	}
	slowed := time.Now()
	var toSlowed []gotRecord
	avoided := 0 // requests in a row sent elsewhere
	for i := 0; avoided < 10; i++ {
		if i == 80 {
			t.Fatalf("80 requests after the slowdown, %d of them to the slowed engine, and not avoided 10 times in a row", len(toSlowed))
		}
		if _, _, r := routeOne(t, addr, sink, uniquePrompt(100+i)); r.Upstream == ups[0].Name {
			toSlowed, avoided = append(toSlowed, r), 0
		} else {
			avoided++
		}
	}
	t.Logf("%d requests met the slowdown; ten in a row avoided it %v after it", len(toSlowed), time.Since(slowed).Round(time.Millisecond))
	if len(toSlowed) == 0 {
		t.Fatal("no request met the slowdown")
	}
	first := toSlowed[0]
	if first.PredictionOff != stages.Prefill || first.PredictionOffBy >= 0 || first.PredictedTTFT() >= first.bd.TTFT {
		t.Errorf("the first request after the slowdown: predicted %v, measured %v; off %v by %v, want prefill, below zero",
			first.PredictedTTFT(), first.bd.TTFT, first.PredictionOff, first.PredictionOffBy)
	}
}

// TestTTFTSLO: a request whose TTFT SLO no upstream is predicted to meet
// is refused at once (429, Retry-After, the OpenAI error shape, its own
// end detail, no upstream) while one that can be met is served and
// records its SLO and prediction; with a fallback pool configured, the
// refused request goes there instead and is served: a least_ttft fallback
// serves it even once it predicts a first token past the SLO. A cold pool
// refuses nothing.
func TestTTFTSLO(t *testing.T) {
	for _, fallback := range []string{"", gateway.PolicyLeastRequest, gateway.PolicyLeastTTFT} {
		t.Run("fallback="+fallback, func(t *testing.T) {
			_, addr, sink, ups := ttftEngines(t, fallback, "", "", "", "")
			slo := []string{gateway.HeaderTTFTSLO, "1"}
			resp, _, r := routeOne(t, addr, sink, uniquePrompt(0), slo...)
			if resp.StatusCode != 200 || r.Predicted {
				t.Fatalf("cold pool: status %d, predicted %v; want served, unpredicted", resp.StatusCode, r.Predicted)
			}
			warm(t, addr, sink, ups, r.Upstream)

			resp, body, r := routeOne(t, addr, sink, uniquePrompt(1), gateway.HeaderTTFTSLO, "600000")
			if resp.StatusCode != 200 || !r.Predicted || r.TTFTSLO.Milliseconds() != 600000 || r.SLOFallback {
				t.Fatalf("a 10-minute SLO: status %d, predicted %v, slo %v, fallback %v: %s", resp.StatusCode, r.Predicted, r.TTFTSLO, r.SLOFallback, body)
			}

			resp, body, r = routeOne(t, addr, sink, uniquePrompt(2), slo...)
			if fallback != "" {
				// A least_ttft fallback: its first request is unpredicted
				// (its upstream's model is cold), its second predicted
				// past the SLO, and both are served.
				rounds := 1
				if fallback == gateway.PolicyLeastTTFT {
					rounds = 2
				}
				for i := range rounds {
					if i > 0 {
						resp, body, r = routeOne(t, addr, sink, uniquePrompt(4), slo...)
					}
					predicted := fallback == gateway.PolicyLeastTTFT && i > 0
					if resp.StatusCode != 200 || !r.SLOFallback || r.Policy != fallback || r.Predicted != predicted || r.Inputs.Set != (fallback == gateway.PolicyLeastTTFT) {
						t.Fatalf("to the fallback (%d): status %d, fallback %v, policy %q, predicted %v, inputs %+v: %s", i, resp.StatusCode, r.SLOFallback, r.Policy, r.Predicted, r.Inputs, body)
					}
					if predicted && r.PredictedTTFT() <= time.Millisecond {
						t.Fatalf("the fallback predicted %v: within the SLO, which proves nothing", r.PredictedTTFT())
					}
					for _, u := range ups {
						if r.Upstream == u.Name {
							t.Fatalf("the fallback request went to %s, in the SLO's pool", u.Name)
						}
					}
				}
				return
			}
			if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" ||
				!strings.Contains(body, `"code":"ttft_slo_unmeetable"`) || !strings.Contains(body, `"type":"rate_limit_exceeded"`) {
				t.Fatalf("refused: status %d, Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
			}
			if r.Reason != endreason.Deadline || r.Detail != endreason.DetailSLOUnmeetable || r.Upstream != "" || r.TTFTSLO.Milliseconds() != 1 {
				t.Fatalf("refused record: %s/%s upstream %q slo %v", r.Reason, r.Detail, r.Upstream, r.TTFTSLO)
			}
			resp, body, _ = routeOne(t, addr, sink, uniquePrompt(3), gateway.HeaderTTFTSLO, "soon")
			if resp.StatusCode != 400 || !strings.Contains(body, gateway.HeaderTTFTSLO) {
				t.Fatalf("a malformed SLO: status %d: %s", resp.StatusCode, body)
			}
		})
	}
}

// TestPrefilledAtFirstToken: a least_ttft request stops holding the
// requests routed after it to its upstream (predict.Load.Ahead) once its
// first token is parsed, before its end; one that ends without a first
// token (a 500), at its end.
func TestPrefilledAtFirstToken(t *testing.T) {
	const yaml = `
routes:
  - model: m
    pool: p
pools:
  - name: p
    upstreams: [UP_A]
    policy: least_ttft
`
	release := make(chan struct{})
	streams := startUpstream(t, func(c *upConn) {
		c.sse()
		c.holdStream(release, "first", "rest")
	})
	addr, sink, p := startGateway(t, yaml, map[string]string{"UP_A": streams.url})
	u := p.Gateway().Snapshot().Pools()[0].Upstreams[0]
	_, br := rawClient(t, addr, chatBody)
	readUntil(t, br, `"first"`) // parsed by the proxy before it was written
	a := u.PredictLoad().Ahead
	close(release)
	if a != 0 {
		t.Fatalf("after its first token reached the client, the stream still held its upstream's next requests %v", a)
	}
	if r := sink.next(t); !r.bd.OK {
		t.Fatalf("the stream: %s/%s", r.Reason, r.Detail)
	}

	failing := startUpstream(t, func(c *upConn) {
		c.whole(500, "application/json", `{"error":{"message":"boom"}}`)
	})
	addr, sink, p = startGateway(t, yaml, map[string]string{"UP_A": failing.url})
	u = p.Gateway().Snapshot().Pools()[0].Upstreams[0]
	if resp, _, r := routeOne(t, addr, sink, chatBody); resp.StatusCode != 500 || r.bd.OK {
		t.Fatalf("status %d, first token %v: want a 500 without one", resp.StatusCode, r.bd.OK)
	}
	if a := u.PredictLoad().Ahead; a != 0 {
		t.Fatalf("after a request ended without a first token, it still holds its upstream's next requests %v", a)
	}
}
