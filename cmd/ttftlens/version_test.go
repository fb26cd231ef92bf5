package main

import (
	"cmp"
	"runtime"
	"runtime/debug"
	"testing"
)

// TestVersionCommand: "version", "--version" and "-version" print the same
// four lines; arguments are a usage error.
func TestVersionCommand(t *testing.T) {
	info := readBuildInfo()
	want := "version:  " + cmp.Or(info.Version, "unknown") + "\nrevision: " + cmp.Or(info.Revision, "unknown") +
		"\ngo:       " + runtime.Version() + "\nbuilt:    " + info.Built + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		r := runCLI("", args...)
		r.check(t, 0, nil, nil)
		if r.stdout != want || r.err != "" {
			t.Errorf("%v: stdout %q, stderr %q; want stdout %q", args, r.stdout, r.err, want)
		}
	}
	runCLI("", "help", "version").check(t, 0, []string{"usage: ttftlens version", "ttftlens_build_info"}, nil)
	runCLI("", "--version", "extra").check(t, 2, nil, []string{`ttftlens version: unexpected argument "extra"`})
}

// TestBuildInfoOf: the Makefile's stamp wins; without it the version and
// the revision come from Go's build info; the Go version from the running
// toolchain; Built says which.
func TestBuildInfoOf(t *testing.T) {
	const (
		rev   = "0ce16c41301da6390e70e3fe1ef35ab51119f6b9"
		other = "1111111111111111111111111111111111111111"
	)
	goV := runtime.Version()
	vcs := &debug.BuildInfo{
		Main: debug.Module{Version: "v0.0.0-20261201135353-0ce16c41301d+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: "2026-12-01T13:53:53Z"}, {Key: "vcs.modified", Value: "true"},
		}}
	devel := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}
	tests := []struct {
		name                        string
		bi                          *debug.BuildInfo
		stampVersion, stampRevision string
		want                        buildInfo
	}{
		{"no build info", nil, "", "", buildInfo{GoVersion: goV, Built: builtPlain}},
		{"go run, no VCS", devel, "", "",
			buildInfo{Version: "(devel)", GoVersion: goV, Built: builtPlain}},
		{"go build in a repository", vcs, "", "",
			buildInfo{Version: "v0.0.0-20261201135353-0ce16c41301d+dirty", Revision: rev, GoVersion: goV, Built: builtVCS}},
		{"go install of a tag", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"}}, "", "",
			buildInfo{Version: "v1.2.0", GoVersion: goV, Built: builtModule}},
		{"make build, no VCS", devel, "v1.2.0-3-g0ce16c4-dirty", rev,
			buildInfo{Version: "v1.2.0-3-g0ce16c4-dirty", Revision: rev, GoVersion: goV, Built: builtStamped}},
		{"make build without tags", devel, "0ce16c4", rev,
			buildInfo{Version: "0ce16c4", Revision: rev, GoVersion: goV, Built: builtStamped}},
		{"make build wins over VCS", vcs, "v1.2.0", other,
			buildInfo{Version: "v1.2.0", Revision: other, GoVersion: goV, Built: builtStamped}},
		{"a stamp without a revision keeps VCS's", vcs, "v1.2.0", "",
			buildInfo{Version: "v1.2.0", Revision: rev, GoVersion: goV, Built: builtStamped}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := buildInfoOf(tt.bi, tt.stampVersion, tt.stampRevision); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
