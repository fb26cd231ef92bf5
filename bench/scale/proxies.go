package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The proxies a run can measure: nginx, the ttftlens under test, and a
// second ttftlens binary (-ttftlens-base), the same change's before.
const (
	nginx        = "nginx"
	ttftlens     = "ttftlens"
	ttftlensBase = "ttftlens-base"
)

// proxyList is -proxies in its order, with ttftlens-base right after
// ttftlens (else last) when there is a base binary and -proxies does not
// place it.
func proxyList(proxies string, base bool) ([]string, error) {
	var names []string
	for name := range strings.SplitSeq(proxies, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name != nginx && name != ttftlens && name != ttftlensBase:
			return nil, fmt.Errorf("-proxies: unknown %q (%s, %s, %s)", name, nginx, ttftlens, ttftlensBase)
		case slices.Contains(names, name):
			return nil, fmt.Errorf("-proxies: %s twice", name)
		case name == ttftlensBase && !base:
			return nil, fmt.Errorf("-proxies: %s needs -ttftlens-base", ttftlensBase)
		}
		names = append(names, name)
	}
	if base && !slices.Contains(names, ttftlensBase) {
		at := len(names)
		if i := slices.Index(names, ttftlens); i >= 0 {
			at = i + 1
		}
		names = slices.Insert(names, at, ttftlensBase)
	}
	return names, nil
}

// ratioColumn is a ratio the tables show: head's value over base's.
type ratioColumn struct{ header, head, base string }

// ratioColumns are the ratios among names: ttftlens over nginx ("ratio"),
// and ttftlens over ttftlens-base ("base→head"), each when both ran.
func ratioColumns(names []string) []ratioColumn {
	var cols []ratioColumn
	for _, c := range []ratioColumn{{"ratio", ttftlens, nginx}, {"base→head", ttftlens, ttftlensBase}} {
		if slices.Contains(names, c.head) && slices.Contains(names, c.base) {
			cols = append(cols, c)
		}
	}
	return cols
}

// startProxy starts a fresh proxy on CPU 0 and warms it up; it returns the
// process and its address.
func (s *suite) startProxy(name string) (*proc, string, error) {
	addr, err := freePort()
	if err != nil {
		return nil, "", err
	}
	var p *proc
	switch name {
	case nginx:
		conf := filepath.Join(s.dir, "nginx.conf")
		if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, s.dir, s.upstream, addr, s.fileLimit), 0o644); err != nil {
			return nil, "", err
		}
		p, err = start(s.dir, name, 0, nil, "nginx", "-p", s.dir, "-c", conf, "-e", filepath.Join(s.dir, "nginx-error.log"))
	case ttftlens, ttftlensBase:
		bin := s.ttftlensBin
		if name == ttftlensBase {
			bin = s.baseBin
		}
		admin, err2 := freePort()
		if err2 != nil {
			return nil, "", err2
		}
		args := []string{bin, "serve", "--listen", addr, "--admin-listen", admin,
			"--upstream", "http://" + s.upstream, "--engine", "generic",
			// Every client connects from 127.0.0.1.
			"--max-conns", "-1", "--max-conns-per-client", "-1", "--log-level", "warn"}
		args = append(args, strings.Fields(s.ttftlensFlags)...)
		records, err2 := os.Create(filepath.Join(s.dir, name+"-records.log"))
		if err2 != nil {
			return nil, "", err2
		}
		defer records.Close()
		p, err = start(s.dir, name, 0, records, args...)
	default:
		return nil, "", fmt.Errorf("-proxies: unknown %q", name)
	}
	if err != nil {
		return nil, "", err
	}
	if err := waitListening(addr, p); err != nil {
		p.stop()
		return nil, "", err
	}
	fmt.Printf("  %s (pid %d on %s, CPU 0)\n", name, p.pid(), addr)
	warm := clientConfig{Tokens: 4, Requests: 50, Conc: 4}
	if _, err := s.client(warm, addr); err != nil {
		p.stop()
		return nil, "", fmt.Errorf("%s warm-up: %w", name, err)
	}
	time.Sleep(200 * time.Millisecond)
	return p, addr, nil
}

// binaryVersion is what a ttftlens binary says of itself ("ttftlens
// version"): its version and revision, "" when it does not say.
func binaryVersion(bin string) string {
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		return ""
	}
	var said []string
	for line := range strings.Lines(string(out)) {
		key, value, _ := strings.Cut(line, ":")
		if key == "version" || key == "revision" {
			said = append(said, key+" "+strings.TrimSpace(value))
		}
	}
	return strings.Join(said, ", ")
}
