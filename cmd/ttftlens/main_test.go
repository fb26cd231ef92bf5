package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/exporters"
	"github.com/ttftlens/ttftlens/exporters/web"
	"github.com/ttftlens/ttftlens/proxy"
	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/refengine/model"
)

// TestMain clears the variables that would change what the commands read,
// so the tests see only what they set. Started with childEnv set, the test
// binary is the ttftlens binary instead (startChild).
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		main()
	}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "TTFTLENS_") || strings.HasPrefix(name, "OTEL_") {
			os.Unsetenv(name)
		}
	}
	os.Exit(m.Run())
}

// result is one run of the command line.
type result struct {
	code        int
	stdout, err string
}

func runCLI(stdin string, args ...string) result {
	var out, errb bytes.Buffer
	code := run(args, stdio{in: strings.NewReader(stdin), out: &out, err: &errb})
	return result{code, out.String(), errb.String()}
}

// check compares r with the wanted status and substrings; "!" before a
// substring means it must be absent.
func (r result) check(t *testing.T, code int, stdout, stderr []string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit status %d, want %d", r.code, code)
	}
	match := func(name, text string, wants []string) {
		for _, w := range wants {
			if not, ok := strings.CutPrefix(w, "!"); ok {
				if strings.Contains(text, not) {
					t.Errorf("%s has %q", name, not)
				}
			} else if !strings.Contains(text, w) {
				t.Errorf("%s lacks %q", name, w)
			}
		}
	}
	match("stdout", r.stdout, stdout)
	match("stderr", r.err, stderr)
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", r.stdout, r.err)
	}
}

// testFiles are files the check-config cases point at.
type testFiles struct {
	cert, key, otherKey   string
	ckpt, ckptShort       string
	ckptUnshared, garbage string
	gateway               string
}

func writeTestFiles(t *testing.T) testFiles {
	t.Helper()
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	write := func(name string, b []byte) string {
		if err := os.WriteFile(path(name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path(name)
	}
	var f testFiles
	certPEM, keyPEM := selfSigned(t)
	f.cert, f.key = write("cert.pem", certPEM), write("key.pem", keyPEM)
	_, otherKey := selfSigned(t)
	f.otherKey = write("other-key.pem", otherKey)

	shape := model.Config{Dim: 8, HiddenDim: 16, Layers: 1, Heads: 2, KVHeads: 2, Vocab: 16, MaxSeq: 8, SharedClassifier: true}
	full := checkpoint(shape)
	f.ckpt = write("model.bin", full)
	f.ckptShort = write("short.bin", full[:len(full)-4])
	unshared := shape
	unshared.SharedClassifier = false
	f.ckptUnshared = write("unshared.bin", checkpoint(unshared))
	f.garbage = write("garbage.bin", []byte("this is not a checkpoint at all, it is text"))

	f.gateway = write("gateway.yaml", []byte(`auth: none
routes:
  - model: m
    pool: p
pools:
  - name: p
    upstreams: [http://127.0.0.1:8000]
`))
	return f
}

// selfSigned returns a PEM certificate and its key.
func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// checkpoint is a llama2.c checkpoint of shape with zero weights: the
// header, then as many float32 as the model package's reader takes.
func checkpoint(c model.Config) []byte {
	vocab := int32(c.Vocab)
	if !c.SharedClassifier {
		vocab = -vocab
	}
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, [7]int32{int32(c.Dim), int32(c.HiddenDim), int32(c.Layers), int32(c.Heads), int32(c.KVHeads), vocab, int32(c.MaxSeq)})
	b.Write(make([]byte, 4*(c.Params()+c.MaxSeq*c.HeadSize())))
	return b.Bytes()
}

// checkCases are command lines for serve; each is run with --check-config
// and, when it must fail, without (serve must fail the same way before it
// listens).
func checkCases(f testFiles) []struct {
	name   string
	args   []string
	ok     bool
	stdout string // for ok
	stderr string // for failures: the error
} {
	return []struct {
		name   string
		args   []string
		ok     bool
		stdout string
		stderr string
	}{
		{"embedded engine", nil, true, "flags ok (no --config; upstream: the embedded reference engine)", ""},
		{"upstream", []string{"--upstream", "http://127.0.0.1:8000"}, true, "flags ok (no --config; upstream http://127.0.0.1:8000)", ""},
		{"https upstream", []string{"--upstream", "https://[::1]:8443/"}, true, "flags ok", ""},
		{"upstream without scheme", []string{"--upstream", "localhost:8000"}, false, "", `--upstream "localhost:8000": no scheme; give the server's base URL, e.g. http://localhost:8000`},
		{"upstream bad scheme", []string{"--upstream", "htp://x"}, false, "", `upstream "htp://x": scheme must be http or https`},
		{"upstream without host", []string{"--upstream", "http://"}, false, "", `upstream "http://": no host`},
		{"upstream bad host", []string{"--upstream", "http://[::1"}, false, "", `missing ']' in host`},
		{"upstream with a path", []string{"--upstream", "http://x/v1"}, false, "", "a path prefix is not supported"},
		{"upstream port out of range", []string{"--upstream", "http://x:99999"}, false, "", "port 99999 out of range"},
		{"upstream with config", []string{"--upstream", "http://x:1", "--config", f.gateway}, false, "", "with --config the upstreams come from the config file"},
		{"engine flags with upstream", []string{"--upstream", "http://x:1", "--engine-ranks", "2", "--engine-fault", "queue_delay=1ms"}, false, "", "--engine-fault, --engine-ranks: flags of the embedded engine"},
		{"engine flags with config", []string{"--config", f.gateway, "--engine-ranks", "2"}, false, "", "--engine-ranks: flags of the embedded engine"},
		{"negative engine ranks", []string{"--engine-ranks", "-1"}, false, "", "embedded engine: ranks is negative"},
		{"negative max event bytes", []string{"--max-event-bytes", "-1"}, false, "", "--max-event-bytes -1: negative"},
		{"upstream header bytes", []string{"--max-upstream-header-bytes", "65536"}, true, "flags ok", ""},
		{"upstream header bytes too few", []string{"--max-upstream-header-bytes", "512"}, false, "", "--max-upstream-header-bytes 512: under 1024 (0 means the default)"},
		{"negative heartbeat", []string{"--heartbeat", "-1s"}, false, "", "--heartbeat -1s: negative"},
		{"body memory below the body limit", []string{"--max-body-bytes", "2048", "--max-body-memory", "1024"}, false, "", "--max-body-memory 1024 below --max-body-bytes 2048"},
		{"a key's body share below the body limit", []string{"--max-body-bytes", "2048", "--max-body-memory-per-key", "1024"}, false, "", "--max-body-memory-per-key 1024: not between --max-body-bytes 2048 and --max-body-memory"},
		{"no body share per key", []string{"--max-body-memory-per-key", "-1"}, true, "flags ok", ""},
		{"negative max header bytes", []string{"--max-header-bytes", "-1"}, false, "", "--max-header-bytes -1: negative"},
		{"max header bytes too small", []string{"--max-header-bytes", "100"}, false, "", "--max-header-bytes 100: under 1024"},
		{"no connection caps", []string{"--max-conns", "-1", "--max-conns-per-client", "-1"}, true, "flags ok", ""},
		{"negative shutdown grace", []string{"--shutdown-grace", "-1s"}, false, "", "--shutdown-grace -1s: negative"},
		{"config", []string{"--config", f.gateway}, true, "flags ok; " + f.gateway + ": ok (auth none, 0 keys, 1 route, 1 pool)", ""},
		{"missing config", []string{"--config", "/nonexistent/gateway.yaml"}, false, "", "/nonexistent/gateway.yaml"},
		{"listen nonsense", []string{"--listen", "nonsense"}, false, "", `--listen "nonsense": address nonsense: missing port in address`},
		{"listen bad port", []string{"--listen", ":99999"}, false, "", `--listen ":99999"`},
		{"admin listen empty", []string{"--admin-listen", ""}, false, "", "--admin-listen: no address"},
		{"same port", []string{"--listen", ":9464"}, false, "", "--listen :9464 and --admin-listen 127.0.0.1:9464: both on port 9464"},
		{"different hosts, same port", []string{"--listen", "127.0.0.2:9464"}, true, "flags ok", ""},
		{"tls", []string{"--tls-cert", f.cert, "--tls-key", f.key}, true, "; TLS certificate ok", ""},
		{"tls cert without key", []string{"--tls-cert", f.cert}, false, "", "--tls-cert and --tls-key go together"},
		{"tls key without cert", []string{"--tls-key", f.key}, false, "", "--tls-cert and --tls-key go together"},
		{"tls missing files", []string{"--tls-cert", "/nope", "--tls-key", "/nope"}, false, "", "--tls-cert/--tls-key: open /nope"},
		{"tls key of another cert", []string{"--tls-cert", f.cert, "--tls-key", f.otherKey}, false, "", "private key does not match public key"},
		{"engine fault", []string{"--engine-fault", "queue_delay=50ms"}, true, "flags ok", ""},
		{"bad engine fault", []string{"--engine-fault", "queue_dely=50ms"}, false, "", `embedded engine: unknown fault "queue_dely"`},
		{"engine model", []string{"--engine-model", f.ckpt, "--engine-ranks", "2"}, true, "flags ok", ""},
		{"missing engine model", []string{"--engine-model", "/nope.bin"}, false, "", "embedded engine: --engine-model: model: cannot open checkpoint: open /nope.bin"},
		{"truncated engine model", []string{"--engine-model", f.ckptShort}, false, "", "truncated"},
		{"not a checkpoint", []string{"--engine-model", f.garbage}, false, "", "not a llama2.c checkpoint"},
		{"too many ranks", []string{"--engine-model", f.ckpt, "--engine-ranks", "3"}, false, "", "--engine-ranks 3: the model has 2 kv heads"},
		{"too many ranks, built-in model", []string{"--engine-ranks", "7"}, false, "", "--engine-ranks 7: the model has 6 kv heads"},
		{"tokenizer without model", []string{"--engine-tokenizer", f.ckpt}, false, "", "a tokenizer file given without a model file"},
		{"missing tokenizer", []string{"--engine-model", f.ckpt, "--engine-tokenizer", "/nope.tok"}, false, "", "--engine-tokenizer: open /nope.tok"},
		{"log level", []string{"--log-level", "WARN"}, true, "flags ok", ""},
		{"bad log level", []string{"--log-level", "loud"}, false, "", `--log-level "loud": want one of debug, info, warn, error`},
		{"engine anthropic", []string{"--engine", "anthropic", "--upstream", "http://x:1"}, true, "flags ok", ""},
		{"bad engine", []string{"--engine", "bogus"}, false, "", `--engine "bogus": want one of auto, reference, vllm, llamacpp, ollama, sglang, tgi, anthropic, generic`},
		{"bad compression", []string{"--compress-streams", "brotli"}, false, "", `--compress-streams "brotli": want gzip or zstd`},
	}
}

func TestCheckConfig(t *testing.T) {
	f := writeTestFiles(t)
	for _, tt := range checkCases(f) {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI("", append([]string{"serve", "--check-config", "--admin-listen=127.0.0.1:9464"}, tt.args...)...)
			if tt.ok {
				r.check(t, 0, []string{tt.stdout}, nil)
				if r.err != "" {
					t.Errorf("stderr: %s", r.err)
				}
				return
			}
			r.check(t, 2, nil, []string{tt.stderr, "!flags ok", "!Usage", "!-admin-listen string"})
			if !strings.HasPrefix(r.err, "ttftlens: ") {
				t.Errorf("stderr %q does not start with \"ttftlens: \"", r.err)
			}
			if r.stdout != "" || strings.Count(r.err, "\n") != 1 {
				t.Errorf("want one line on stderr and nothing on stdout")
			}
		})
	}
}

// TestServeFailsAsCheckConfig: every command line --check-config refuses,
// serve refuses with the same message, before it listens.
func TestServeFailsAsCheckConfig(t *testing.T) {
	f := writeTestFiles(t)
	for _, tt := range checkCases(f) {
		if tt.ok {
			continue
		}
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"serve", "--admin-listen=127.0.0.1:9464"}, tt.args...)
			check := runCLI("", append(args, "--check-config")...)
			done := make(chan result, 1)
			go func() { done <- runCLI("", args...) }()
			select {
			case serve := <-done:
				if serve.code != check.code || serve.err != check.err {
					t.Errorf("serve: %d %q\ncheck: %d %q", serve.code, serve.err, check.code, check.err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("serve accepted what --check-config refused, and is running")
			}
		})
	}
}

// TestCheckConfigEnv: values from the environment are checked the same way.
func TestCheckConfigEnv(t *testing.T) {
	f := writeTestFiles(t)
	tests := []struct {
		name, env, value string
		args             []string
		code             int
		stderr           string
	}{
		{"upstream from env with --config", "TTFTLENS_UPSTREAM", "http://x:1", []string{"--config", f.gateway}, 2, "drop --upstream (or TTFTLENS_UPSTREAM)"},
		{"bad log level", "TTFTLENS_LOG_LEVEL", "loud", nil, 2, "--log-level \"loud\""},
		{"bad duration", "TTFTLENS_TOTAL_TIMEOUT", "soon", nil, 2, "TTFTLENS_TOTAL_TIMEOUT=\"soon\""},
		{"negative total timeout", "TTFTLENS_TOTAL_TIMEOUT", "-1s", nil, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(tt.env, tt.value)
			r := runCLI("", append([]string{"serve", "--check-config"}, tt.args...)...)
			var want []string
			if tt.stderr != "" {
				want = []string{tt.stderr}
			}
			r.check(t, tt.code, nil, want)
		})
	}
}

func TestHelp(t *testing.T) {
	overview := []string{"usage: ttftlens [command] [flags]", "serve ", "engine ", "bench ", "report ", "replay ", "demo ", "hash-key ", "ttftlens serve -h", "!-admin-listen"}
	serveFlags := []string{"usage: ttftlens serve [flags]", "-admin-listen string", "-upstream string", "-engine-fault"}
	tests := []struct {
		args   []string
		stdout []string
	}{
		{[]string{"-h"}, overview},
		{[]string{"--help"}, overview},
		{[]string{"-help"}, overview},
		{[]string{"help"}, overview},
		{[]string{"serve", "-h"}, serveFlags},
		{[]string{"serve", "--help"}, serveFlags},
		{[]string{"help", "serve"}, serveFlags},
		{[]string{"engine", "-h"}, []string{"usage: ttftlens engine [flags]", "-listen string", "-fault string"}},
		{[]string{"bench", "-h"}, []string{"usage: ttftlens bench [flags]", "-url string", "Exits 1 when the server cannot be\nreached (nothing is sent then) or every request failed"}},
		{[]string{"report", "-h"}, []string{"usage: ttftlens report LOGFILE"}},
		{[]string{"replay", "-h"}, []string{"usage: ttftlens replay [flags] LOGFILE", "-half-life duration", "-recorded-backlog"}},
		{[]string{"demo", "--help"}, []string{"usage: ttftlens demo SCENARIO | list"}},
		{[]string{"hash-key", "-h"}, []string{"usage: ttftlens hash-key [KEY]", "!\nsha256:"}},
		{[]string{"hash-key", "--help"}, []string{"usage: ttftlens hash-key [KEY]", "!\nsha256:"}},
		{[]string{"help", "hash-key"}, []string{"usage: ttftlens hash-key [KEY]"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := runCLI("", tt.args...)
			r.check(t, 0, tt.stdout, nil)
			if r.err != "" {
				t.Errorf("stderr: %s", r.err)
			}
		})
	}
}

// TestOverviewLines: the overview names every command, one line each,
// and fits a terminal.
func TestOverviewLines(t *testing.T) {
	r := runCLI("", "help")
	for name := range commands {
		n := 0
		for line := range strings.SplitSeq(r.stdout, "\n") {
			if strings.HasPrefix(line, "  "+name+" ") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("command %s: %d overview lines", name, n)
		}
	}
	for line := range strings.SplitSeq(r.stdout, "\n") {
		if len(line) > 80 {
			t.Errorf("line over 80 columns: %q", line)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args   []string
		stderr string
		hint   string
	}{
		{[]string{"--bogus"}, "ttftlens serve: flag provided but not defined: -bogus", "run 'ttftlens serve -h' for the flags"},
		{[]string{"serve", "--listen"}, "ttftlens serve: flag needs an argument: -listen", "run 'ttftlens serve -h' for the flags"},
		{[]string{"serve", "--total-timeout", "x"}, `ttftlens serve: invalid value "x" for flag -total-timeout`, "run 'ttftlens serve -h' for the flags"},
		{[]string{"serve", "extra"}, `ttftlens serve: unexpected argument "extra"`, "run 'ttftlens serve -h' for the flags"},
		{[]string{"--upstream", "http://x:1", "extra", "--listen", ":1"}, `ttftlens serve: unexpected argument "extra"`, "run 'ttftlens serve -h' for the flags"},
		{[]string{"engine", "--nope"}, "ttftlens engine: flag provided but not defined: -nope", "run 'ttftlens engine -h' for the flags"},
		{[]string{"engine", "extra"}, `ttftlens engine: unexpected argument "extra"`, "run 'ttftlens engine -h' for the flags"},
		{[]string{"bench", "-c"}, "ttftlens bench: flag needs an argument: -c", "run 'ttftlens bench -h' for the flags"},
		{[]string{"bench", "http://x"}, `ttftlens bench: unexpected argument "http://x"`, "run 'ttftlens bench -h' for the flags"},
		{[]string{"report"}, "ttftlens report: no log file given", "run 'ttftlens report -h' for its usage"},
		{[]string{"report", "-", "a", "-"}, "ttftlens report: - (stdin) given more than once", "run 'ttftlens report -h' for its usage"},
		{[]string{"report", "--x"}, "ttftlens report: flag provided but not defined: -x", "run 'ttftlens report -h' for its usage"},
		{[]string{"replay"}, "ttftlens replay: no log file given", "run 'ttftlens replay -h' for its usage"},
		{[]string{"replay", "-half-life", "0s", "a"}, "ttftlens replay: -half-life 0s: must be above zero", "run 'ttftlens replay -h' for its usage"},
		{[]string{"demo"}, "ttftlens demo: no scenario given", "run 'ttftlens demo -h' for its usage"},
		{[]string{"demo", "queue", "extra"}, `ttftlens demo: 2 arguments ["queue" "extra"]: give one scenario`, "run 'ttftlens demo -h' for its usage"},
		{[]string{"demo", "nope"}, `ttftlens demo: unknown scenario "nope"`, "run 'ttftlens demo -h' for its usage"},
		{[]string{"hash-key", "-x"}, "ttftlens hash-key: unknown flag -x (hash-key takes no flags", "run 'ttftlens hash-key -h' for its usage"},
		{[]string{"hash-key", "--key=abc"}, "ttftlens hash-key: unknown flag --key=abc", "run 'ttftlens hash-key -h' for its usage"},
		{[]string{"hash-key", "a", "b"}, "ttftlens hash-key: 2 arguments", "run 'ttftlens hash-key -h' for its usage"},
		{[]string{"hash-key"}, "ttftlens hash-key: no key on stdin", "run 'ttftlens hash-key -h' for its usage"},
		{[]string{"nope"}, `ttftlens: unknown command "nope"`, "run 'ttftlens help' for the commands"},
		{[]string{"help", "nope"}, `ttftlens: unknown command "nope"`, "run 'ttftlens help' for the commands"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := runCLI("", tt.args...)
			r.check(t, 2, nil, nil)
			if want := tt.stderr; !strings.HasPrefix(r.err, want) {
				t.Errorf("stderr %q, want it to start with %q", r.err, want)
			}
			if lines := strings.Split(strings.TrimSuffix(r.err, "\n"), "\n"); len(lines) != 2 || lines[1] != tt.hint {
				t.Errorf("stderr %q: want the error and the line %q", r.err, tt.hint)
			}
			if r.stdout != "" {
				t.Errorf("stdout: %s", r.stdout)
			}
		})
	}
}

// TestFlagErrorHints: a mistyped flag or command names the nearest one, on
// every command, and a duration without a unit says which units it takes,
// on the command line and in the environment. The whole of stderr.
func TestFlagErrorHints(t *testing.T) {
	const units = "30s, 500ms, 2m, 1h30m (units: ns, us, ms, s, m, h)"
	tests := []struct {
		env, value string // an environment variable to set, when env is not ""
		args       []string
		stderr     string
	}{
		{"", "", []string{"--upsteam", "http://x:1"},
			"ttftlens serve: flag provided but not defined: -upsteam (did you mean -upstream?)\nrun 'ttftlens serve -h' for the flags\n"},
		{"", "", []string{"serve", "-totl-timeout=1s"},
			"ttftlens serve: flag provided but not defined: -totl-timeout (did you mean -total-timeout?)\nrun 'ttftlens serve -h' for the flags\n"},
		{"", "", []string{"serve", "--engine-media-timeot", "5s"},
			"ttftlens serve: flag provided but not defined: -engine-media-timeot (did you mean -engine-media-timeout?)\nrun 'ttftlens serve -h' for the flags\n"},
		{"", "", []string{"engine", "--lisen", ":1"},
			"ttftlens engine: flag provided but not defined: -lisen (did you mean -listen?)\nrun 'ttftlens engine -h' for the flags\n"},
		{"", "", []string{"bench", "--urll", "http://x:1"},
			"ttftlens bench: flag provided but not defined: -urll (did you mean -url?)\nrun 'ttftlens bench -h' for the flags\n"},
		{"", "", []string{"bench", "-x"}, // one byte is all of it: no guess
			"ttftlens bench: flag provided but not defined: -x\nrun 'ttftlens bench -h' for the flags\n"},
		{"", "", []string{"version", "--verbose"},
			"ttftlens version: flag provided but not defined: -verbose\nrun 'ttftlens version -h' for its usage\n"},
		{"", "", []string{"serve", "--no-such-flag"}, // nothing near: no guess
			"ttftlens serve: flag provided but not defined: -no-such-flag\nrun 'ttftlens serve -h' for the flags\n"},
		{"", "", []string{"sevre"},
			"ttftlens: unknown command \"sevre\" (did you mean \"serve\"?)\nrun 'ttftlens help' for the commands\n"},
		{"", "", []string{"help", "bnech"},
			"ttftlens: unknown command \"bnech\" (did you mean \"bench\"?)\nrun 'ttftlens help' for the commands\n"},
		{"", "", []string{"serve", "--total-timeout", "30"},
			"ttftlens serve: invalid value \"30\" for flag -total-timeout: use a unit: " + units + "\nrun 'ttftlens serve -h' for the flags\n"},
		{"", "", []string{"serve", "--idle-timeout=1.5"},
			"ttftlens serve: invalid value \"1.5\" for flag -idle-timeout: use a unit: " + units + "\nrun 'ttftlens serve -h' for the flags\n"},
		{"", "", []string{"serve", "--total-timeout", "soon"},
			"ttftlens serve: invalid value \"soon\" for flag -total-timeout: not a duration: use a number and a unit: " + units + "\nrun 'ttftlens serve -h' for the flags\n"},
		{"", "", []string{"engine", "--media-timeout", "10"},
			"ttftlens engine: invalid value \"10\" for flag -media-timeout: use a unit: " + units + "\nrun 'ttftlens engine -h' for the flags\n"},
		{"", "", []string{"serve", "--engine-media-timeout", "10"},
			"ttftlens serve: invalid value \"10\" for flag -engine-media-timeout: use a unit: " + units + "\nrun 'ttftlens serve -h' for the flags\n"},
		{"", "", []string{"serve", "--engine-ranks", "two"}, // not a duration: the flag package's words
			"ttftlens serve: invalid value \"two\" for flag -engine-ranks: parse error\nrun 'ttftlens serve -h' for the flags\n"},
		{"TTFTLENS_TOTAL_TIMEOUT", "30", []string{"serve"},
			"ttftlens serve: TTFTLENS_TOTAL_TIMEOUT=\"30\": use a unit: " + units + "\nrun 'ttftlens serve -h' for the flags\n"},
		{"TTFTLENS_BENCH_D", "10", []string{"bench"},
			"ttftlens bench: TTFTLENS_BENCH_D=\"10\": use a unit: " + units + "\nrun 'ttftlens bench -h' for the flags\n"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " ")+" "+tt.env, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv(tt.env, tt.value)
			}
			r := runCLI("", tt.args...)
			r.check(t, 2, nil, nil)
			if r.err != tt.stderr {
				t.Errorf("stderr\n%q\nwant\n%q", r.err, tt.stderr)
			}
		})
	}
}

func TestHashKey(t *testing.T) {
	const testHash = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" // of "test"
	tests := []struct {
		stdin string
		args  []string
		want  string
	}{
		{"test", nil, testHash},
		{"  test\n", nil, testHash},
		{"", []string{"test"}, testHash},
		{"test", []string{"-"}, testHash},
		{"", []string{"--", "test"}, testHash},
		{"", []string{"--", "-h"}, "sha256:05dc0e47773fb3a7a4dc132574919f02b6242879820e347dc00a1962a96636b5"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q %q", tt.stdin, tt.args), func(t *testing.T) {
			r := runCLI(tt.stdin, append([]string{"hash-key"}, tt.args...)...)
			r.check(t, 0, nil, nil)
			if r.stdout != tt.want+"\n" {
				t.Errorf("stdout %q, want %q", r.stdout, tt.want)
			}
		})
	}
}

// TestServeHelpText: what the help says matches what the code does.
func TestServeHelpText(t *testing.T) {
	help := runCLI("", "serve", "-h").stdout
	flagHelp := func(name string) string {
		_, after, ok := strings.Cut(help, "\n  -"+name+" ")
		if !ok {
			t.Fatalf("no -%s in the help", name)
		}
		line, _, _ := strings.Cut(after, "\n  -")
		return line
	}
	t.Run("engine kinds", func(t *testing.T) {
		h := flagHelp("engine")
		for _, k := range append([]string{proxy.EngineAuto}, engines.Kinds...) {
			if !strings.Contains(h, k) {
				t.Errorf("--engine help lacks %s: %s", k, h)
			}
		}
	})
	t.Run("admin endpoints", func(t *testing.T) {
		h := flagHelp("admin-listen")
		paths := []string{"/metrics", "/health", "/ready", "/engine/metrics"}
		for p := range web.Routes(exporters.NewRing(exporters.RingOptions{})) {
			if strings.HasSuffix(p, ".js") || strings.HasSuffix(p, ".css") {
				continue // the page's own files
			}
			paths = append(paths, strings.TrimSuffix(strings.TrimSuffix(p, "*"), "/"))
		}
		for _, p := range paths {
			if p != "" && !strings.Contains(h, p) {
				t.Errorf("--admin-listen help lacks %s: %s", p, h)
			}
		}
	})
	t.Run("total timeout", func(t *testing.T) {
		h := flagHelp("total-timeout")
		if !strings.Contains(h, "(default "+proxy.DefaultTotalTimeout.String()+")") || !strings.Contains(h, "negative: none") {
			t.Errorf("--total-timeout help: %s", h)
		}
	})
	t.Run("engine metrics", func(t *testing.T) {
		h := flagHelp("scrape-engine-metrics")
		if !strings.HasPrefix(h, "duration") || !strings.Contains(h, "(default "+proxy.DefaultEngineScrape.String()+")") ||
			!strings.Contains(h, "0: off") {
			t.Errorf("--scrape-engine-metrics help: %s", h)
		}
	})
	t.Run("log levels", func(t *testing.T) {
		h := flagHelp("log-level")
		for _, l := range logLevels {
			if !strings.Contains(h, l) {
				t.Errorf("--log-level help lacks %s: %s", l, h)
			}
		}
	})
}

// TestServeDefaults: serve with no flags bounds every request's life, gives
// no client its breakdown and lets no client inject faults.
func TestServeDefaults(t *testing.T) {
	var f serveFlags
	fs := newFlagSet("serve", "", "TTFTLENS_")
	f.register(fs.FlagSet)
	if err := fs.parse(nil, stdio{}); err != nil {
		t.Fatal(err)
	}
	cfg := f.cfg
	cfg.Upstream = "http://x:1"
	if err := cfg.Normalize(); err != nil {
		t.Fatal(err)
	}
	if cfg.TotalTimeout != proxy.DefaultTotalTimeout || cfg.AllowBreakdown || cfg.AllowFaults {
		t.Errorf("total timeout %v, breakdown %v, faults %v; want %v, off, off",
			cfg.TotalTimeout, cfg.AllowBreakdown, cfg.AllowFaults, proxy.DefaultTotalTimeout)
	}
	none := proxy.Config{Upstream: "http://x:1", TotalTimeout: -1}
	if err := none.Normalize(); err != nil || none.TotalTimeout != 0 {
		t.Errorf("--total-timeout -1: normalized to %v (%v), want 0 (none)", none.TotalTimeout, err)
	}
}

// TestScrapeEngineMetricsFlag: the engines' /metrics are polled unless
// --scrape-engine-metrics (or its variable) turns it off with 0; not
// given, the proxy's defaults apply (least_load pools keep their own).
func TestScrapeEngineMetricsFlag(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		env, want time.Duration // env: TTFTLENS_SCRAPE_ENGINE_METRICS when not 0
	}{
		{"not given: the defaults", nil, 0, 0},
		{"given", []string{"--scrape-engine-metrics=2s"}, 0, 2 * time.Second},
		{"given as the default", []string{"--scrape-engine-metrics=15s"}, 0, 15 * time.Second},
		{"0: off", []string{"--scrape-engine-metrics=0"}, 0, -1},
		{"0s: off", []string{"--scrape-engine-metrics=0s"}, 0, -1},
		{"the variable", nil, 30 * time.Second, 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != 0 {
				t.Setenv("TTFTLENS_SCRAPE_ENGINE_METRICS", tt.env.String())
			}
			var f serveFlags
			fs := newFlagSet("serve", "", "TTFTLENS_")
			f.register(fs.FlagSet)
			if err := fs.parse(tt.args, stdio{}); err != nil {
				t.Fatal(err)
			}
			if f.cfg.ScrapeEngineMetrics != tt.want {
				t.Errorf("Config.ScrapeEngineMetrics %v, want %v", f.cfg.ScrapeEngineMetrics, tt.want)
			}
		})
	}
}

// TestCheckListen covers address forms without binding anything.
func TestCheckListen(t *testing.T) {
	tests := []struct {
		listen, admin string
		ok            bool
	}{
		{":8080", "127.0.0.1:9464", true},
		{":0", ":0", true},
		{"[::1]:8080", "[::1]:9464", true},
		{"127.0.0.1:8080", "127.0.0.2:8080", true},
		{":http", ":9464", true},
		{":8080", "127.0.0.1:8080", false},
		{"[::]:8080", "[::1]:8080", false},
		{"0.0.0.0:8080", ":8080", false},
		{"8080", ":9464", false},
		{":8080", "localhost", false},
		{":-1", ":9464", false},
		{"", ":9464", false},
	}
	for _, tt := range tests {
		if err := checkListen(listenFlag{flag: "--listen", addr: tt.listen}, listenFlag{flag: "--admin-listen", addr: tt.admin}); (err == nil) != tt.ok {
			t.Errorf("checkListen(%q, %q) = %v, want ok=%v", tt.listen, tt.admin, err, tt.ok)
		}
	}
}

// TestReportCommand runs "ttftlens report" on a file, on stdin, and on
// several replicas' logs at once.
func TestReportCommand(t *testing.T) {
	line := `{"msg":"request","request_id":"a","path":"/v1/chat/completions","model":"m","end_reason":"length","end_detail":"finish_length","ttft_ms":3,"e2e_ms":9,"stages_ms":{"prefill":2,"queue":1}}`
	// Another replica's log: a failure on the same route and model, and a
	// request of another model.
	other := `{"msg":"request","request_id":"b","path":"/v1/chat/completions","model":"m","end_reason":"worker_failure","end_detail":"upstream_5xx","e2e_ms":4}` + "\n" +
		`{"msg":"request","request_id":"c","path":"/v1/chat/completions","model":"n","end_reason":"length","end_detail":"finish_length","ttft_ms":5,"e2e_ms":7,"stages_ms":{"prefill":5}}` + "\n" +
		`{"level":"info","message":"ttftlens serving"}`
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	file := write("log.jsonl", line+"\n")
	file2 := write("log2.jsonl", other+"\n")
	empty := write("empty.jsonl", "")
	tests := []struct {
		name   string
		stdin  string
		args   []string
		code   int
		stdout []string
		stderr []string
	}{
		{"file", "", []string{file}, 0, []string{"1 request record\n", "model m: 1 request, 1 with a first token", "!1 requests"}, nil},
		{"stdin", line + "\n" + line, []string{"-"}, 0, []string{"2 request records\n", "model m: 2 requests"}, nil},
		{"missing file", "", []string{"/nope.jsonl"}, 2, nil, []string{"ttftlens: open /nope.jsonl"}},
		{"no records", "", []string{empty}, 2, nil, []string{"no request records"}},
		{"two logs", "", []string{file, file2}, 0, []string{
			"3 request records from 2 logs (skipped 1 other log line and 0 malformed)\n",
			"model m: 2 requests, 1 with a first token", "model n: 1 request, 1 with a first token",
			"    length          finish_length  1  50.0%\n", "    worker_failure  upstream_5xx   1  50.0%\n",
		}, nil},
		{"a log and stdin", line, []string{file, "-", empty}, 0, []string{"2 request records from 3 logs\n", "model m: 2 requests, 2 with a first token"}, nil},
		{"no records in any log", "", []string{empty, empty}, 2, nil, []string{"no request records in " + empty + ", " + empty + " (0 lines read)"}},
		{"one missing among logs", "", []string{file, "/nope.jsonl", file2}, 2, []string{"!request"}, []string{"ttftlens: open /nope.jsonl"}},
		{"a directory among logs", "", []string{file, dir}, 2, []string{"!request"}, []string{"ttftlens: report: reading " + dir + ": read " + dir + ": is a directory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runCLI(tt.stdin, append([]string{"report"}, tt.args...)...).check(t, tt.code, tt.stdout, tt.stderr)
		})
	}
}

// TestReplayCommand runs "ttftlens replay" on the log's least_ttft golden
// lines (a routing with its inputs, predicted: replayed by models that
// have seen nothing before it, so not predicted again) and on records of
// another pool (no inputs to replay).
func TestReplayCommand(t *testing.T) {
	routed := filepath.Join("..", "..", "exporters", "testdata", "log", "stop_least_ttft.json")
	other := filepath.Join("..", "..", "exporters", "testdata", "log", "stop_engine_report.json")
	runCLI("", "replay", routed).check(t, 0, []string{"Replayed 1 least_ttft routings on 1 upstreams: 0 predicted", "| queue |"}, nil)
	runCLI("", "replay", other).check(t, 2, nil, []string{"ttftlens replay: no record in 1 carries prediction_inputs: only a least_ttft pool's do"})
}

// deadURL is a loopback URL nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "http://" + ln.Addr().String()
}

func TestEngineVars(t *testing.T) {
	got := engineVars([]string{"TTFTLENS_ENGINE=vllm", "TTFTLENS_ENGINE_FAULT=queue_delay=1s", "HOME=/root", "TTFTLENS_ENGINE_RANKS=2"})
	if want := []string{"TTFTLENS_ENGINE_FAULT", "TTFTLENS_ENGINE_RANKS"}; !slices.Equal(got, want) {
		t.Errorf("engineVars = %q, want %q", got, want)
	}
}
