package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/gateway"
)

// readConfig reads and parses the config file at path, and returns the
// SHA-256 of the bytes it parsed.
func readConfig(path string) (*gateway.Config, [32]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, [32]byte{}, fmt.Errorf("read config: %w", err)
	}
	cfg, err := gateway.Parse(data, path)
	return cfg, sha256.Sum256(data), err
}

// configReloader applies the config file to a running gateway: on SIGHUP,
// and when a look at the file, every --config-watch, finds its content
// changed. It compares content, not file events or mtimes: a ConfigMap
// volume changes the file by renaming a symlink one level up (..data; the
// file's own link stays as it was), an editor by renaming a new file over
// it; reading the file through its path sees every way. Requests in flight
// keep the configuration they started with; a file that does not load
// changes nothing and is logged (by a look, once until it changes again).
type configReloader struct {
	gw      *gateway.Gateway
	path    string
	log     zerolog.Logger
	sum     [32]byte // of the content last read, applied or refused
	readErr string   // the read failure last logged, until a read succeeds
}

// startConfigReloader runs a configReloader of path, whose content in
// effect has the SHA-256 sum, until the returned stop; every <= 0 watches
// for SIGHUP only.
func startConfigReloader(gw *gateway.Gateway, path string, sum [32]byte, every time.Duration, log zerolog.Logger) (stop func()) {
	r := &configReloader{gw: gw, path: path, log: log, sum: sum}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.run(ctx, hup, every) })
	return func() {
		signal.Stop(hup)
		cancel()
		wg.Wait()
	}
}

// catchHangups catches SIGHUP until the returned stop, so that it never
// takes its default action: ending the process at once, its requests cut
// without their records. With logIt (no config file, so nothing to
// reload) each one is logged; otherwise a configReloader answers it.
func catchHangups(log zerolog.Logger, logIt bool) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-hup:
				if logIt {
					log.Info().Str("signal", "SIGHUP").Msg("nothing to reload without --config; SIGHUP ignored")
				}
			}
		}
	})
	return func() {
		signal.Stop(hup)
		close(done)
		wg.Wait()
	}
}

// run reloads on each hup and on each look, every `every` (none when
// <= 0), that finds the file changed, until ctx ends.
func (r *configReloader) run(ctx context.Context, hup <-chan os.Signal, every time.Duration) {
	var look <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		look = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.reload("SIGHUP", true)
		case <-look:
			r.reload("file changed", false)
		}
	}
}

// reload reads the file and applies it: always when forced, otherwise
// only when its content differs from the last read.
func (r *configReloader) reload(trigger string, force bool) {
	data, err := os.ReadFile(r.path)
	if err != nil {
		if force || err.Error() != r.readErr {
			r.failed(trigger, fmt.Errorf("read config: %w", err))
		}
		r.readErr = err.Error()
		return
	}
	r.readErr = ""
	sum := sha256.Sum256(data)
	if sum == r.sum && !force {
		return
	}
	r.sum = sum
	cfg, err := gateway.Parse(data, r.path)
	if err == nil {
		err = r.gw.Reload(cfg)
	}
	if err != nil {
		r.failed(trigger, err)
		return
	}
	r.log.Info().Str("config", r.path).Str("trigger", trigger).Msg("configuration reloaded")
}

func (r *configReloader) failed(trigger string, err error) {
	r.log.Error().Err(err).Str("config", r.path).Str("trigger", trigger).Msg("reload failed; keeping the running configuration")
}
