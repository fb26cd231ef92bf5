package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/internal/logtest"
)

// configMapVolume is a directory written the way the kubelet projects a
// ConfigMap into a pod: the data in a hidden timestamped directory, the
// symlink ..data to it, and the visible file a symlink through ..data.
type configMapVolume struct {
	t   *testing.T
	dir string
}

// write projects config.yaml with content as the kubelet's atomic writer
// does an update: a new timestamped directory with the file, the visible
// link if missing, a symlink ..data_tmp to the new directory renamed over
// ..data, then the old directory removed. Every version of the file has
// the same mtime, as the kubelet does not promise a newer one.
func (v configMapVolume) write(content string) {
	t := v.t
	t.Helper()
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	ts, err := os.MkdirTemp(v.dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(ts, "config.yaml")
	sameTime := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	must(t, os.Chmod(ts, 0o755))
	must(t, os.WriteFile(file, []byte(content), 0o644))
	must(t, os.Chtimes(file, sameTime, sameTime))
	visible := filepath.Join(v.dir, "config.yaml")
	if _, err := os.Lstat(visible); os.IsNotExist(err) {
		must(t, os.Symlink(filepath.Join("..data", "config.yaml"), visible))
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	must(t, os.Symlink(filepath.Base(ts), tmp))
	must(t, os.Rename(tmp, filepath.Join(v.dir, "..data")))
	if old != "" {
		must(t, os.RemoveAll(filepath.Join(v.dir, old)))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// keyConfig is a gateway config whose one API key is key.
func keyConfig(key string) string {
	return "keys: [{name: k, key: " + gateway.HashKey(key) + "}]\n" +
		"routes: [{model: m, pool: p}]\n" +
		"pools: [{name: p, upstreams: [\"http://127.0.0.1:1\"]}]\n"
}

// TestConfigWatchReload: a ConfigMap update (the kubelet's symlink swap,
// mtime unchanged) is reloaded without a signal; a file that does not load
// (a bad config, then no file at all) is logged once each and the running
// configuration kept; SIGHUP still reloads; stopping leaves no goroutine.
func TestConfigWatchReload(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	vol := configMapVolume{t: t, dir: t.TempDir()}
	vol.write(keyConfig("first"))
	path := filepath.Join(vol.dir, "config.yaml")
	logs := &logtest.Lines{}
	log := zerolog.New(logs)
	gw, sum, err := loadGateway(path, &log)
	if err != nil {
		t.Fatal(err)
	}
	stop := startConfigReloader(gw, path, sum, 5*time.Millisecond, log)
	defer stop()
	accepts := func(key string) bool {
		k, rej := gw.Authenticate([]byte("Bearer " + key))
		return rej == nil && k != nil
	}
	const reloaded, failed = "configuration reloaded", "reload failed; keeping the running configuration"
	// want checks a reload's log line: errPart "" for one without an error.
	want := func(line map[string]any, trigger, errPart string) {
		t.Helper()
		if line["config"] != path || line["trigger"] != trigger {
			t.Errorf("log line %v: want config %s, trigger %s", line, path, trigger)
		}
		e, hasErr := line["error"].(string)
		if hasErr != (errPart != "") || !strings.Contains(e, errPart) {
			t.Errorf("log line %v: want the error %q", line, errPart)
		}
	}

	vol.write(keyConfig("second"))
	want(logs.WaitFor(t, reloaded, 1, nil)[0], "file changed", "")
	if !accepts("second") || accepts("first") {
		t.Fatalf("after the swap: second key accepted %v, first %v; want the new config only", accepts("second"), accepts("first"))
	}

	vol.write("routes: [{model: m, pool: nope}]\npools: [{name: p, upstreams: [\"http://127.0.0.1:1\"]}]\n")
	want(logs.WaitFor(t, failed, 1, nil)[0], "file changed", `unknown pool "nope"`)
	must(t, os.Remove(path)) // the key gone from the ConfigMap
	want(logs.WaitFor(t, failed, 2, nil)[1], "file changed", "no such file")
	if !accepts("second") {
		t.Fatal("a bad file replaced the running configuration")
	}

	vol.write(keyConfig("third"))
	want(logs.WaitFor(t, reloaded, 2, nil)[1], "file changed", "")
	if !accepts("third") || accepts("second") {
		t.Fatal("the config after a bad one is not in effect")
	}
	if n := len(logs.With(t, failed)); n != 2 {
		t.Errorf("%d failure lines, want 2: one per bad content, not one per look", n)
	}

	must(t, syscall.Kill(os.Getpid(), syscall.SIGHUP)) // the content is unchanged: only the signal reloads
	want(logs.WaitFor(t, reloaded, 3, nil)[2], "SIGHUP", "")
	stop()
}
