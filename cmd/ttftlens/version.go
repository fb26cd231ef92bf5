package main

import (
	"cmp"
	"fmt"
	"runtime"
	"runtime/debug"
)

// The Makefile's build target sets these with -ldflags -X: the output of
// "git describe --tags --always --dirty" and the commit. Empty in any
// other build.
var (
	stampedVersion  string
	stampedRevision string
)

// How the binary's version came to be known: buildInfo.Built, as
// "ttftlens version" says it.
const (
	builtStamped = "by make build (version stamped from git describe)"
	builtVCS     = "by go build in a git checkout (Go's VCS stamp)"
	builtModule  = "by go install of a module version"
	builtPlain   = "by go run or go build without a version (run 'make build' for a stamped binary)"
)

// buildInfo is what the binary was built from: "ttftlens version" prints
// it, and ttftlens_build_info carries its version and revision as labels.
type buildInfo struct {
	// Version is the Makefile's stamp, else the main module's version: a
	// tag, a pseudo-version (+dirty when built from a modified work tree),
	// or "(devel)".
	Version string
	// Revision is the commit: the Makefile's stamp, else Go's VCS stamp;
	// "" when the build recorded none (go run, -buildvcs=false, no
	// repository).
	Revision string
	// GoVersion is the Go release that built the binary.
	GoVersion string
	// Built says how the version came to be known (builtStamped ...).
	Built string
}

// readBuildInfo is this binary's build info.
func readBuildInfo() buildInfo {
	bi, _ := debug.ReadBuildInfo()
	return buildInfoOf(bi, stampedVersion, stampedRevision)
}

// buildInfoOf is the build info from Go's (bi, nil when none was embedded)
// and the Makefile's stamp (empty: none), which wins.
func buildInfoOf(bi *debug.BuildInfo, stampVersion, stampRevision string) buildInfo {
	info := buildInfo{GoVersion: runtime.Version()}
	if bi != nil {
		info.Version = bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				info.Revision = s.Value
			}
		}
	}
	switch {
	case stampVersion != "":
		info.Version, info.Revision, info.Built = stampVersion, cmp.Or(stampRevision, info.Revision), builtStamped
	case info.Revision != "":
		info.Built = builtVCS
	case info.Version != "" && info.Version != "(devel)":
		info.Built = builtModule
	default:
		info.Built = builtPlain
	}
	return info
}

// runVersion is "ttftlens version" (and "ttftlens --version").
func runVersion(args []string, std stdio) error {
	fs := newFlagSet("version", versionHelp, "TTFTLENS_VERSION_")
	if err := fs.parse(args, std); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	info := readBuildInfo()
	// "unknown" for a value not recorded, as ttftlens_build_info labels it.
	fmt.Fprintf(std.out, "version:  %s\nrevision: %s\ngo:       %s\nbuilt:    %s\n",
		cmp.Or(info.Version, "unknown"), cmp.Or(info.Revision, "unknown"), info.GoVersion, info.Built)
	return nil
}

const versionHelp = `usage: ttftlens version

Prints the version, the VCS revision and the Go version the binary was
built from (the labels of the ttftlens_build_info metric), and how it was
built. 'make build' stamps the version and the commit from git; without
it, go build in a git checkout records Go's own (a pseudo-version), and
go run records none. A value the build did not record is "unknown".
"ttftlens --version" is the same.
`
