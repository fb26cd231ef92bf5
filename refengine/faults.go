package refengine

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// FaultHeader is the request header that carries per-request faults.
const FaultHeader = "X-Ttftlens-Fault"

// maxFaultDelay bounds every injected delay so a typo cannot park a request
// for hours.
const maxFaultDelay = 10 * time.Minute

// Faults is a parsed set of injected faults. The zero value injects nothing.
// Counts ("after k tokens") refer to generated tokens; -1 means "not set".
// See FAULTS.md for what each one does.
type Faults struct {
	QueueDelay       time.Duration // queue_delay=D: held in the waiting queue at least D
	SlowTokenizer    time.Duration // slow_tokenizer=D: the tokenizer worker spends D more
	SlowMedia        time.Duration // slow_media=D: every media fetch takes D more
	StragglerRank    int           // straggler=R:D: rank R sleeps D per layer (steps with this request)
	StragglerDelay   time.Duration
	LongPrompt       int           // long_prompt=N: N filler tokens prepended to the prompt
	SlowPrefill      float64       // slow_prefill=F: this request's prompt tokens take F times as long (0: not set)
	Buffered         bool          // buffered: every token held back until the end
	StallAfter       int           // stall=K:D: pause D after token K
	StallFor         time.Duration //
	ResetAfter       int           // reset_after=K: TCP RST after K tokens
	CloseAfter       int           // close_after=K: end the body cleanly after K tokens, no finish, no [DONE]
	HTTPError        int           // http_error=S: status S (5xx) before any header
	ErrorAfter       int           // error_after=K: error event after K tokens, then end
	ContentFilter    int           // content_filter[=K]: finish_reason content_filter after K tokens (default 0)
	HoldHeaders      bool          // hold_headers: no headers until the first token
	KeepDecoding     bool          // keep_decoding: ignore the client leaving
	IgnoreDisconnect int           // ignore_disconnect=K: ignore the client leaving for K more tokens, then stop
}

// noFaults is the neutral set: all "after K" counts unset.
func noFaults() Faults {
	return Faults{StragglerRank: -1, StallAfter: -1, ResetAfter: -1, CloseAfter: -1, ErrorAfter: -1, ContentFilter: -1, IgnoreDisconnect: -1}
}

// ignoresDisconnect reports that the request goes on when its client
// leaves: to its end (keep_decoding), or for a number of tokens
// (ignore_disconnect, counted by the scheduler).
func (f Faults) ignoresDisconnect() bool {
	return f.KeepDecoding || f.IgnoreDisconnect > 0
}

// stopsAfterGone reports that a request whose client left has generated
// all the tokens ignore_disconnect lets it.
func (f Faults) stopsAfterGone(afterGone int) bool {
	return f.IgnoreDisconnect > 0 && afterGone >= f.IgnoreDisconnect
}

// ParseFaults parses a comma-separated fault list such as
// "queue_delay=200ms,slow_tokenizer=50ms,buffered" into a Faults starting
// from the neutral set. Whitespace around items is ignored; an empty string
// is no faults.
func ParseFaults(s string) (Faults, error) {
	f := noFaults()
	err := f.apply(s)
	return f, err
}

// apply parses s and sets the faults it names on f, leaving the others.
func (f *Faults) apply(s string) error {
	if len(s) > 4096 {
		return errors.New("fault list too long")
	}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, val, hasVal := strings.Cut(item, "=")
		name = strings.TrimSpace(name)
		val = strings.TrimSpace(val)
		var err error
		switch name {
		case "queue_delay":
			f.QueueDelay, err = parseDelay(val)
		case "slow_tokenizer":
			f.SlowTokenizer, err = parseDelay(val)
		case "slow_media":
			f.SlowMedia, err = parseDelay(val)
		case "straggler":
			r, d, ok := strings.Cut(val, ":")
			if !ok {
				err = errors.New("want RANK:DURATION")
				break
			}
			if f.StragglerRank, err = parseCount(r); err != nil {
				break
			}
			f.StragglerDelay, err = parseDelay(d)
		case "long_prompt":
			f.LongPrompt, err = parseCount(val)
			if err == nil && f.LongPrompt > 1<<20 {
				err = errors.New("too many tokens")
			}
		case "slow_prefill":
			f.SlowPrefill, err = parseFactor(val)
		case "buffered":
			f.Buffered, err = parseFlag(hasVal, val)
		case "stall":
			k, d, ok := strings.Cut(val, ":")
			if !ok {
				err = errors.New("want TOKENS:DURATION")
				break
			}
			if f.StallAfter, err = parseCount(k); err != nil {
				break
			}
			f.StallFor, err = parseDelay(d)
		case "reset_after":
			f.ResetAfter, err = parseCount(val)
		case "close_after":
			f.CloseAfter, err = parseCount(val)
		case "error_after":
			f.ErrorAfter, err = parseCount(val)
		case "content_filter":
			if !hasVal {
				f.ContentFilter = 0
				break
			}
			f.ContentFilter, err = parseCount(val)
		case "http_error":
			f.HTTPError, err = strconv.Atoi(val)
			if err == nil && (f.HTTPError < 500 || f.HTTPError > 599) {
				err = errors.New("want a 5xx status")
			}
		case "hold_headers":
			f.HoldHeaders, err = parseFlag(hasVal, val)
		case "keep_decoding":
			f.KeepDecoding, err = parseFlag(hasVal, val)
		case "ignore_disconnect":
			f.IgnoreDisconnect, err = parseCount(val)
		default:
			return fmt.Errorf("unknown fault %q", name)
		}
		if err != nil {
			return fmt.Errorf("fault %s: %w", name, err)
		}
	}
	return nil
}

func parseDelay(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("want a duration like 200ms")
	}
	if d < 0 || d > maxFaultDelay {
		return 0, fmt.Errorf("duration out of range [0, %v]", maxFaultDelay)
	}
	return d, nil
}

func parseCount(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 1<<30 {
		return 0, errors.New("want a non-negative integer")
	}
	return n, nil
}

// maxSlowPrefill bounds slow_prefill's factor.
const maxSlowPrefill = 100

func parseFactor(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v >= 1 && v <= maxSlowPrefill) {
		return 0, fmt.Errorf("want a factor from 1 to %d", maxSlowPrefill)
	}
	return v, nil
}

func parseFlag(hasVal bool, s string) (bool, error) {
	if !hasVal {
		return true, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, errors.New("want true or false")
	}
	return b, nil
}

// String renders f in the header syntax (only the faults that are set).
func (f Faults) String() string {
	var parts []string
	add := func(s string) { parts = append(parts, s) }
	if f.QueueDelay > 0 {
		add("queue_delay=" + f.QueueDelay.String())
	}
	if f.SlowTokenizer > 0 {
		add("slow_tokenizer=" + f.SlowTokenizer.String())
	}
	if f.SlowMedia > 0 {
		add("slow_media=" + f.SlowMedia.String())
	}
	if f.StragglerRank >= 0 {
		add(fmt.Sprintf("straggler=%d:%s", f.StragglerRank, f.StragglerDelay))
	}
	if f.LongPrompt > 0 {
		add("long_prompt=" + strconv.Itoa(f.LongPrompt))
	}
	if f.SlowPrefill > 0 {
		add("slow_prefill=" + strconv.FormatFloat(f.SlowPrefill, 'g', -1, 64))
	}
	if f.Buffered {
		add("buffered")
	}
	if f.StallAfter >= 0 {
		add(fmt.Sprintf("stall=%d:%s", f.StallAfter, f.StallFor))
	}
	if f.ResetAfter >= 0 {
		add("reset_after=" + strconv.Itoa(f.ResetAfter))
	}
	if f.CloseAfter >= 0 {
		add("close_after=" + strconv.Itoa(f.CloseAfter))
	}
	if f.HTTPError > 0 {
		add("http_error=" + strconv.Itoa(f.HTTPError))
	}
	if f.ErrorAfter >= 0 {
		add("error_after=" + strconv.Itoa(f.ErrorAfter))
	}
	if f.ContentFilter >= 0 {
		add("content_filter=" + strconv.Itoa(f.ContentFilter))
	}
	if f.HoldHeaders {
		add("hold_headers")
	}
	if f.KeepDecoding {
		add("keep_decoding")
	}
	if f.IgnoreDisconnect >= 0 {
		add("ignore_disconnect=" + strconv.Itoa(f.IgnoreDisconnect))
	}
	return strings.Join(parts, ",")
}
