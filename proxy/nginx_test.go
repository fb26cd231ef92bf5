//go:build integration && linux && (amd64 || arm64)

package proxy_test

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/internal/testbin"
)

// nginxConf is a configuration for one nginx in the foreground, in one
// process, with every path under its own directory: a reverse proxy to one
// upstream, HTTP/1.1 with keep-alive, as nginx is put in front of engines.
// With buffering on, nginx also ignores the engine's X-Accel-Buffering: no,
// which would turn it off.
const nginxConf = `daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 256; }
http {
	access_log off;
	client_body_temp_path %[1]s/client_body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	upstream engine { server %[2]s; keepalive 8; }
	server {
		listen %[3]s;
		location / {
			proxy_pass http://engine;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_buffering %[4]s;
			%[5]s
		}
	}
}
`

// nginxFront returns an upstream start: target's upstream behind a real
// nginx (Debian's package; scripts/test.sh installs it) with
// proxy_buffering on or off, stopped by its PID when the test ends.
func nginxFront(target startFunc, buffering bool) startFunc {
	return func(t *testing.T) string {
		nginx := testbin.Path(t, "nginx")
		up, err := url.Parse(target(t))
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		// A free port for nginx: the kernel's pick, released just before
		// nginx binds it.
		ln := listen(t)
		addr := ln.Addr().String()
		ln.Close()
		mode, ignore := "off", ""
		if buffering {
			mode, ignore = "on", "proxy_ignore_headers X-Accel-Buffering;"
		}
		conf := filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, dir, up.Host, addr, mode, ignore), 0o644); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd := exec.Command(nginx, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"))
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatalf("nginx: %v", err)
		}
		var waitErr error
		exited := make(chan struct{})
		go func() { waitErr = cmd.Wait(); close(exited) }()
		logs := func() string {
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			return out.String() + string(log)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGQUIT) // graceful: its connections end first
			<-exited
			if waitErr != nil {
				t.Errorf("nginx: %v\n%s", waitErr, logs())
			}
		})
		for {
			if c, err := net.Dial("tcp", addr); err == nil {
				c.Close()
				return "http://" + addr
			}
			select {
			case <-exited:
				t.Fatalf("nginx exited before listening: %v\n%s", waitErr, logs())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}
