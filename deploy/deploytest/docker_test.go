//go:build integration

package deploytest

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dockerfile is the part of deploy/docker/Dockerfile the check reads.
type dockerfile struct {
	build      string   // the RUN line that builds the binary
	entrypoint []string // exec form
	cmd        []string // exec form
	expose     []string // ports
}

func readDockerfile(t *testing.T, path string) dockerfile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var d dockerfile
	execForm := func(v string) []string {
		var out []string
		if err := json.Unmarshal([]byte(v), &out); err != nil {
			t.Fatalf("%s: %q is not an exec-form array: %v", path, v, err)
		}
		return out
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		instr, rest, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		switch instr {
		case "RUN":
			if strings.Contains(rest, "go build") {
				d.build = rest
			}
		case "ENTRYPOINT":
			d.entrypoint = execForm(rest)
		case "CMD":
			d.cmd = execForm(rest)
		case "EXPOSE":
			d.expose = append(d.expose, strings.Fields(rest)...)
		}
	}
	if d.build == "" || len(d.entrypoint) == 0 {
		t.Fatalf("%s: no go build RUN line or no ENTRYPOINT", path)
	}
	return d
}

// TestDockerfile checks the image recipe without a Docker engine (none runs
// on the project's machines): its build command, run here as written, makes
// a static binary (the distroless/static base has no libc); its ENTRYPOINT
// and CMD are flags ttftlens accepts; every EXPOSEd port is one the
// default command listens on for other hosts, not only on loopback; and
// that binary builds into deploy/docker/Containerfile.scratch's image.
func TestDockerfile(t *testing.T) {
	d := readDockerfile(t, "../docker/Dockerfile")
	bin := filepath.Join(t.TempDir(), "ttftlens")

	// Docker runs a shell-form RUN line with sh -c; so does the test, in
	// the build context (the repository root), writing where it can.
	out := "-o " + d.entrypoint[0]
	if !strings.Contains(d.build, out+" ") {
		t.Fatalf("build line %q does not write the ENTRYPOINT's %s", d.build, d.entrypoint[0])
	}
	build := exec.Command("sh", "-c", strings.Replace(d.build, out, "-o "+bin, 1))
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", d.build, err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the binary needs a dynamic loader: it cannot run on distroless/static")
		}
	}
	f.Close()

	run := append(append(append([]string{}, d.entrypoint[1:]...), d.cmd...), "--check-config")
	if out, err := exec.Command(bin, run...).CombinedOutput(); err != nil || !bytes.Contains(out, []byte("flags ok")) {
		t.Fatalf("ttftlens %s: %v\n%s", strings.Join(run, " "), err, out)
	}

	listens := listenAddrs(t, bin, append(d.entrypoint[1:], d.cmd...))
	for _, port := range d.expose {
		port = strings.TrimSuffix(port, "/tcp")
		if host, ok := listens[port]; !ok {
			t.Errorf("EXPOSE %s: the default command listens on %v", port, listens)
		} else if host != "" && host != "0.0.0.0" && host != "::" {
			t.Errorf("EXPOSE %s: the default command listens on %s only, unreachable from outside the container", port, net.JoinHostPort(host, port))
		}
	}

	// The same binary in the image FROM scratch, built by podman.
	t.Run("Containerfile.scratch", func(t *testing.T) { checkScratchImage(t, bin, d) })
}

var flagDefault = regexp.MustCompile(`(?m)^\s+-(listen|admin-listen) string\n.*\(default "([^"]*)"\)`)

// listenAddrs maps each port the serve command listens on to its host,
// from the flags' defaults in --help and the given args.
func listenAddrs(t *testing.T, bin string, args []string) map[string]string {
	t.Helper()
	help, _ := exec.Command(bin, "serve", "--help").CombinedOutput()
	addr := map[string]string{}
	for _, m := range flagDefault.FindAllStringSubmatch(string(help), -1) {
		addr[m[1]] = m[2]
	}
	if len(addr) != 2 {
		t.Fatalf("could not read the listen defaults from serve --help:\n%s", help)
	}
	for i, a := range args { // --flag=value or --flag value
		name, v, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if _, known := addr[name]; !known || !strings.HasPrefix(a, "-") {
			continue
		}
		if !hasValue && i+1 < len(args) {
			v = args[i+1]
		}
		addr[name] = v
	}
	out := map[string]string{}
	for _, a := range addr {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatalf("listen address %q: %v", a, err)
		}
		out[port] = host
	}
	return out
}
