package main

import (
	"cmp"
	"fmt"
	"runtime"
	"runtime/debug"
)

// buildInfo is what the binary was built from: "ttftlens version" prints
// it, and ttftlens_build_info carries the same values as its labels.
type buildInfo struct {
	// Version is the main module's version: a tag, a pseudo-version
	// (+dirty when built from a modified work tree), or "(devel)".
	Version string
	// Revision is the VCS commit, "" when the build recorded none (go
	// run, -buildvcs=false, no repository).
	Revision string
	// GoVersion is the Go release that built the binary.
	GoVersion string
}

// readBuildInfo is this binary's build info.
func readBuildInfo() buildInfo {
	bi, _ := debug.ReadBuildInfo()
	return buildInfoOf(bi)
}

// buildInfoOf extracts the build info from bi (nil: none was embedded).
func buildInfoOf(bi *debug.BuildInfo) buildInfo {
	info := buildInfo{GoVersion: runtime.Version()}
	if bi == nil {
		return info
	}
	info.Version = bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			info.Revision = s.Value
		}
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
	fmt.Fprintf(std.out, "version:  %s\nrevision: %s\ngo:       %s\n",
		cmp.Or(info.Version, "unknown"), cmp.Or(info.Revision, "unknown"), info.GoVersion)
	return nil
}

const versionHelp = `usage: ttftlens version

Prints the module version, the VCS revision and the Go version the binary
was built from: the labels of the ttftlens_build_info metric. A value the
build did not record is "unknown". "ttftlens --version" is the same.
`
