//go:build integration

package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/internal/testbin"
)

// Timeout is a Redis quota backend's timeout in tests: long, so that a
// round trip under -race on a loaded machine never falls back; the tests
// that want Redis to time out set their own.
const Timeout = 2 * time.Second

// Server is Debian's redis-server run by a test on its own port and data
// directory (never the system service), without persistence, stopped by
// its PID. The test command installs redis-server when it is missing.
type Server struct {
	t    testing.TB
	Addr string
	bin  string
	dir  string
	cmd  *exec.Cmd
}

// Start starts a redis-server for t, stopped when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := testbin.Path(t, "redis-server")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	r := &Server{t: t, Addr: addr, bin: bin, dir: t.TempDir()}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

// Start runs the server (again, after Stop: empty, as a restarted Redis
// without persistence is) and waits until it answers PING.
func (r *Server) Start() {
	r.t.Helper()
	_, port, _ := net.SplitHostPort(r.Addr)
	r.cmd = exec.Command(r.bin, "--port", port, "--bind", "127.0.0.1", "--dir", r.dir,
		"--save", "", "--appendonly", "no", "--logfile", "")
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	for range 500 {
		if r.ping() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.Stop()
	r.t.Fatalf("redis-server on %s did not answer PING", r.Addr)
}

// Stop ends the server by its PID and waits for it to exit.
func (r *Server) Stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	_ = r.cmd.Wait()
	r.cmd = nil
}

func (r *Server) ping() bool {
	reply, err := r.Do("PING")
	return err == nil && reply == "+PONG"
}

// Get sends one command whose reply is a bulk string and returns it ("" for
// nil).
func (r *Server) Get(args ...string) (string, error) {
	return r.do(true, args)
}

// Do sends one command on a new connection and returns the first line of
// the reply.
func (r *Server) Do(args ...string) (string, error) {
	return r.do(false, args)
}

func (r *Server) do(bulk bool, args []string) (string, error) {
	var reply string
	err := r.send(args, func(br *bufio.Reader) error {
		line, err := readLine(br)
		if err != nil || !bulk || line == "$-1" {
			reply = strings.TrimPrefix(line, "$-1")
			return err
		}
		if !strings.HasPrefix(line, "$") {
			return fmt.Errorf("not a bulk string: %s", line)
		}
		reply, err = readLine(br)
		return err
	})
	return reply, err
}

// WaitSubscribed waits until n clients or more are subscribed to channel.
func (r *Server) WaitSubscribed(channel string, n int64) {
	r.t.Helper()
	for {
		var got int64
		err := r.send([]string{"PUBSUB", "NUMSUB", channel}, func(br *bufio.Reader) error {
			var line string
			var err error
			for range 4 { // *2, $len, the channel, :count
				if line, err = readLine(br); err != nil {
					return err
				}
			}
			got, err = strconv.ParseInt(strings.TrimPrefix(line, ":"), 10, 64)
			return err
		})
		if err == nil && got >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// send sends one command on a new connection and hands read its reply.
func (r *Server) send(args []string, read func(*bufio.Reader) error) error {
	c, err := net.DialTimeout("tcp", r.Addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	cmd := "*" + strconv.Itoa(len(args)) + "\r\n"
	for _, a := range args {
		cmd += "$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n"
	}
	if _, err := c.Write([]byte(cmd)); err != nil {
		return err
	}
	return read(bufio.NewReader(c))
}

// readLine reads one line of a reply, without its CRLF.
func readLine(br *bufio.Reader) (string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(line, "\r\n"), nil
}

// KeyPrefix is a key prefix of the test's own, unique to this process.
func (r *Server) KeyPrefix() string {
	return "test:" + strconv.Itoa(os.Getpid()) + ":" + r.t.Name() + ":"
}
