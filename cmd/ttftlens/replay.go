package main

import (
	"github.com/ttftlens/ttftlens/bench/replay"
	"github.com/ttftlens/ttftlens/gateway/predict"
)

const replayHelp = `usage: ttftlens replay [flags] LOGFILE...   (- reads stdin)

Replays a least_ttft pool's records (the JSON lines "ttftlens serve" writes)
through fresh TTFT models, one per upstream: each request is predicted from
what its record says the model was asked (prediction_inputs), by models
taught only the requests that had ended by then, and compared with what it
measured. Prints the prediction error overall, by upstream, for hits and
misses, and per stage. With the model the proxy ran, the replay agrees with
the records' predictions; with another (-half-life, or a change to
gateway/predict) it says how far that one would have been off on the same
requests. Give one replica's log, or, where the replicas shared their
routing (share_routing), every replica's logs with -recorded-backlog: their
models learned from all of them, and the backlog recorded counts every
replica's work.
`

// runReplay is "ttftlens replay LOGFILE...": bench/replay over the records
// of every file given, merged.
func runReplay(args []string, std stdio) error {
	fs := newFlagSet("replay", replayHelp, "TTFTLENS_REPLAY_")
	halfLife := fs.Duration("half-life", predict.DefaultHalfLife, "how fast the models forget: an observation one half-life old counts half as much as a new one")
	recordedBacklog := fs.Bool("recorded-backlog", false, "ask each model with the backlog the record holds, not the one the replay's own predictions add up to")
	if err := fs.parse(args, std); err != nil {
		return err
	}
	if *halfLife <= 0 {
		return usagef("replay", "-half-life %s: must be above zero", *halfLife)
	}
	names, err := logFileArgs("replay", fs.Args())
	if err != nil {
		return err
	}
	recs, _, err := readLogFiles("replay", names, std)
	if err != nil {
		return err
	}
	res := replay.Run(recs, replay.Options{Model: predict.Config{HalfLife: *halfLife}, RecordedBacklog: *recordedBacklog})
	if res.Routed == 0 {
		return usagef("replay", "no record in %d carries prediction_inputs: only a least_ttft pool's do", len(recs))
	}
	res.Write(std.out)
	return nil
}
