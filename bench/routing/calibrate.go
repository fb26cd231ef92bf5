package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/ttftlens/ttftlens/bench"
)

// capacity is the requests a second the engines completed while a closed
// loop kept them busy: the requests that ended complete between from and
// to on the run's clock, over that time. The window leaves out the start
// (cold caches, an empty pipeline) and the end (the loop no longer
// starting requests).
func capacity(run *bench.Run, from, to time.Duration) (float64, error) {
	if to <= from {
		return 0, fmt.Errorf("the window from %s to %s is empty", from, to)
	}
	done := 0
	for i := range run.Results {
		r := &run.Results[i]
		if end := r.Start + r.E2E; r.OK() && end >= from && end < to {
			done++
		}
	}
	if done == 0 {
		return 0, errors.New("no request of the calibration completed in its window")
	}
	return float64(done) / (to - from).Seconds(), nil
}

// arrivalRate is the open loop's rate: load times the capacity, in
// requests a second.
func arrivalRate(capacity, load float64) (float64, error) {
	if !(load > 0) {
		return 0, fmt.Errorf("load %v: want a positive fraction of the capacity", load)
	}
	r := capacity * load
	if !(r > 0) {
		return 0, fmt.Errorf("capacity %v: nothing to send", capacity)
	}
	return r, nil
}
