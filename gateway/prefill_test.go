package gateway

import (
	"fmt"
	"testing"
	"time"

	"github.com/valyala/fastjson"

	"github.com/ttftlens/ttftlens/gateway/predict"
	"github.com/ttftlens/ttftlens/internal/clock"
)

// leadAndFollow routes, in a one-upstream least_ttft pool, a new prompt's
// first request (the leader) and, a quarter of its predicted TTFT later,
// a second of the same prompt (the follower), and checks how each was
// chosen: the leader leads, the follower follows it, predicted to wait the
// rest of the leader's predicted TTFT, in its queue.
func leadAndFollow(t *testing.T) (*clock.Fake, *Upstream, Choice, Choice) {
	t.Helper()
	_, s, r, clk := ttftPool(t, 1, 0)
	u := r.Pool.Upstreams[0]
	alike.teach(u, clk.Now())
	var p fastjson.Parser
	system := systemPrompt(7, 1500)
	req := chatRequest(t, s, &p, system, "First?")
	leader := choose(t, s, &req)
	req.Release()
	if leader.Lead == 0 || leader.Follow != 0 || !leader.Predicted {
		t.Fatalf("a new prompt's first request: lead %d, follow %d, predicted %v; want a leader", leader.Lead, leader.Follow, leader.Predicted)
	}
	clk.Advance(leader.Prediction.Total / 4)
	req = chatRequest(t, s, &p, system, "Second?")
	follower := choose(t, s, &req)
	req.Release()
	if want := leader.Prediction.Total - leader.Prediction.Total/4; follower.Follow == 0 || follower.Lead != 0 || follower.Wait != want {
		t.Fatalf("the second request: follow %d, lead %d, wait %v; want a follower waiting %v", follower.Follow, follower.Lead, follower.Wait, want)
	}
	if follower.Expected.Cached == 0 || follower.Prediction.Parts[predict.Queue] < follower.Wait {
		t.Fatalf("the follower: expected %+v, predicted queue %v; want a hit, the wait in its queue", follower.Expected, follower.Prediction.Parts[predict.Queue])
	}
	return clk, u, leader, follower
}

// TestPrefillFollow: a request of a prompt another request is computing
// on its upstream waits for that request's first token, and goes on when
// it comes (the leader done), when the client leaves (false), when the
// leader is as late again as it was predicted, or when eight leaders
// after it take its leader's place; no follower is left behind, and the
// prompt has no leader once its leader is done.
func TestPrefillFollow(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(clk *clock.Fake, u *Upstream, leader, follower *Choice, cancel chan struct{})
		want bool
	}{
		{"the leader's first token", func(_ *clock.Fake, u *Upstream, leader, _ *Choice, _ chan struct{}) { u.PrefillDone(leader) }, true},
		{"the client leaves", func(_ *clock.Fake, _ *Upstream, _, _ *Choice, cancel chan struct{}) { close(cancel) }, false},
		{"the leader as late again as predicted", func(clk *clock.Fake, _ *Upstream, leader, follower *Choice, _ chan struct{}) {
			clk.Advance(follower.Wait + leader.Prediction.Total)
		}, true},
		{"eight leaders after it", func(clk *clock.Fake, u *Upstream, _, _ *Choice, _ chan struct{}) {
			for i := range prefillSlots {
				u.prefills.lead(uint64(1000+i), int64(clk.Now()), time.Hour)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk, u, leader, follower := leadAndFollow(t)
			cancel := make(chan struct{})
			armed := clk.Armed()
			done := make(chan bool, 1)
			go func() { done <- u.AwaitPrefill(&follower, cancel) }()
			clk.WaitArmed(armed + 1) // it waits
			select {
			case ok := <-done:
				t.Fatalf("AwaitPrefill returned %v before its end", ok)
			default:
			}
			tc.end(clk, u, &leader, &follower, cancel)
			if ok := <-done; ok != tc.want {
				t.Fatalf("AwaitPrefill: %v, want %v", ok, tc.want)
			}
			for i := range u.prefills.slots {
				if u.prefills.slots[i].head != nil {
					t.Fatalf("slot %d still has a follower", i)
				}
			}
			u.PrefillDone(&leader)
			u.PrefillDone(&leader) // once done, nothing
			if _, led := u.prefills.wait(follower.Follow, int64(clk.Now())); led {
				t.Fatal("the prompt still has a leader after its leader was done")
			}
		})
	}
}

// TestPrefillLeaders: only a request that computes most of a prompt likely
// to come again leads it, and only a hit on the leader's own upstream
// follows; one whose leader is done, or late, goes on at once.
func TestPrefillLeaders(t *testing.T) {
	t.Run("a lone message leads nothing", func(t *testing.T) {
		_, s, r, clk := ttftPool(t, 1, 0)
		alike.teach(r.Pool.Upstreams[0], clk.Now())
		var p fastjson.Parser
		body := fmt.Appendf(nil, `{"model":"m","messages":[{"role":"user","content":%q}]}`, systemPrompt(9, 1500))
		req, rej := s.CheckRequest(&p, Chat, body)
		if rej != nil {
			t.Fatal(rej)
		}
		if c := choose(t, s, &req); c.Lead != 0 {
			t.Fatalf("a lone message leads (%d)", c.Lead)
		}
		req.Release()
	})
	t.Run("a leader late past its prediction is still followed", func(t *testing.T) {
		clk, u, leader, follower := leadAndFollow(t)
		clk.Advance(leader.Prediction.Total) // past its predicted first token
		if wait, led := u.prefills.wait(follower.Follow, int64(clk.Now())); !led || wait != 0 {
			t.Fatalf("wait %v, led %v; want 0, led", wait, led)
		}
	})
	t.Run("done before the follower waits", func(t *testing.T) {
		_, u, leader, follower := leadAndFollow(t)
		u.PrefillDone(&leader)
		if !u.AwaitPrefill(&follower, nil) {
			t.Fatal("AwaitPrefill: false")
		}
	})
	t.Run("the leader's upstream only", func(t *testing.T) {
		_, s, _ := alikePool(t)
		var p fastjson.Parser
		system := systemPrompt(11, 1500)
		req := chatRequest(t, s, &p, system, "First?")
		leader := choose(t, s, &req)
		req.Release()
		for range 3 { // the leader's upstream busy: the next goes elsewhere
			if _, rej := leader.Upstream.Acquire(nil); rej != nil {
				t.Fatal(rej)
			}
		}
		req = chatRequest(t, s, &p, system, "Second?")
		c := choose(t, s, &req)
		req.Release()
		if c.Upstream == leader.Upstream || c.Follow != 0 {
			t.Fatalf("%s (follow %d), the leader on %s; want another, following none", c.Upstream.Name, c.Follow, leader.Upstream.Name)
		}
	})
}
