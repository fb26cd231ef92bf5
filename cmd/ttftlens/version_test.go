package main

import (
	"cmp"
	"runtime"
	"runtime/debug"
	"testing"
)

// TestVersionCommand: "version", "--version" and "-version" print the same
// three lines; arguments are a usage error.
func TestVersionCommand(t *testing.T) {
	info := readBuildInfo()
	want := "version:  " + cmp.Or(info.Version, "unknown") + "\nrevision: " + cmp.Or(info.Revision, "unknown") +
		"\ngo:       " + runtime.Version() + "\n"
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

// TestBuildInfoOf: the module version and the VCS revision come from the
// build info, the Go version from the running toolchain.
func TestBuildInfoOf(t *testing.T) {
	const rev = "0ce16c41301da6390e70e3fe1ef35ab51119f6b9"
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		want buildInfo
	}{
		{"no build info", nil, buildInfo{GoVersion: runtime.Version()}},
		{"go run, no VCS", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			buildInfo{Version: "(devel)", GoVersion: runtime.Version()}},
		{"built in a repository", &debug.BuildInfo{
			Main: debug.Module{Version: "v0.0.0-20261201135353-0ce16c41301d+dirty"},
			Settings: []debug.BuildSetting{
				{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev},
				{Key: "vcs.time", Value: "2026-12-01T13:53:53Z"}, {Key: "vcs.modified", Value: "true"},
			}},
			buildInfo{Version: "v0.0.0-20261201135353-0ce16c41301d+dirty", Revision: rev, GoVersion: runtime.Version()}},
		{"tagged release", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}}},
			buildInfo{Version: "v1.2.0", Revision: rev, GoVersion: runtime.Version()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := buildInfoOf(tt.bi); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
