//go:build integration

package deploytest

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ttftlens/ttftlens/internal/testbin"
)

// scratchImage is what `podman image inspect` says of an image.
type scratchImage struct {
	Config struct {
		User         string              `json:"User"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		Entrypoint   []string            `json:"Entrypoint"`
		Cmd          []string            `json:"Cmd"`
		Labels       map[string]string   `json:"Labels"`
	} `json:"Config"`
	Size int64 `json:"Size"`
}

// checkScratchImage builds deploy/docker/Containerfile.scratch with podman
// (Debian's package; scripts/test.sh installs it) from the static binary
// bin, as its comment tells a user to, and inspects the image: the same
// entrypoint, default command and ports as the Dockerfile's image, a
// non-root user, the OCI image-spec annotations as labels, and a size
// near the binary's own. podman keeps its storage, state and temporary
// files under the test's temporary directory, so the test leaves no image
// behind (it runs nothing: only build and inspect work on these machines).
// Its one file outside is containers/image's blob cache database, which
// root's podman keeps in /var/lib/containers/cache whatever the flags.
func checkScratchImage(t *testing.T, bin string, docker dockerfile) {
	const containerfile = "../docker/Containerfile.scratch"
	recipe, err := os.ReadFile(containerfile)
	if err != nil {
		t.Fatal(err)
	}
	// The build line the comment gives is the Dockerfile's, run by the caller.
	var documented string
	if m := regexp.MustCompile(`(?m)^#\s+(GOWORK=off CGO_ENABLED=0 go build .*)$`).FindSubmatch(recipe); m != nil {
		documented = strings.Replace(string(m[1]), "-o image/ttftlens", "-o /ttftlens", 1)
	}
	if documented != docker.build {
		t.Errorf("%s documents the build %q (into image/), the Dockerfile runs %q", containerfile, documented, docker.build)
	}

	podman := testbin.Path(t, "podman")
	context := t.TempDir()
	// podman refuses a run root path over 50 bytes: t.TempDir's are longer.
	dir, err := os.MkdirTemp("", "podman-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for src, dst := range map[string]string{bin: "ttftlens", "/etc/ssl/certs/ca-certificates.crt": "ca-certificates.crt"} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(context, dst), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) []byte {
		t.Helper()
		args = append([]string{
			"--root", filepath.Join(dir, "storage"), "--runroot", filepath.Join(dir, "run"),
			"--tmpdir", filepath.Join(dir, "libpod"), "--storage-driver", "vfs", "--events-backend", "none",
		}, args...)
		cmd := exec.Command(podman, args...)
		cmd.Env = append(os.Environ(), "TMPDIR="+dir)
		out, err := cmd.Output()
		if err != nil {
			stderr := ""
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("podman %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
		}
		return out
	}
	const tag = "localhost/ttftlens:test"
	run("build", "--quiet", "-f", containerfile, "-t", tag,
		"--build-arg", "VERSION=0.1.0-test", "--build-arg", "REVISION=0123abc", "--build-arg", "CREATED=2026-12-01T00:00:00Z", context)
	var images []scratchImage
	if err := json.Unmarshal(run("image", "inspect", tag), &images); err != nil || len(images) != 1 {
		t.Fatalf("podman image inspect: %d images, %v", len(images), err)
	}
	img := images[0].Config

	if !slices.Equal(img.Entrypoint, docker.entrypoint) || !slices.Equal(img.Cmd, docker.cmd) {
		t.Errorf("entrypoint %q cmd %q; the Dockerfile's: %q %q", img.Entrypoint, img.Cmd, docker.entrypoint, docker.cmd)
	}
	var want []string
	for _, p := range docker.expose {
		want = append(want, strings.TrimSuffix(p, "/tcp")+"/tcp")
	}
	slices.Sort(want)
	if got := slices.Sorted(maps.Keys(img.ExposedPorts)); !slices.Equal(got, want) {
		t.Errorf("exposed ports %v; the Dockerfile's: %v", got, want)
	}
	// distroless' nonroot user and group, as the Dockerfile's base runs.
	if img.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (non-root)", img.User)
	}
	for label, value := range map[string]string{
		"org.opencontainers.image.title":    "ttftlens",
		"org.opencontainers.image.version":  "0.1.0-test",
		"org.opencontainers.image.revision": "0123abc",
		"org.opencontainers.image.created":  "2026-12-01T00:00:00Z",
	} {
		if img.Labels[label] != value {
			t.Errorf("label %s = %q, want %q", label, img.Labels[label], value)
		}
	}
	if img.Labels["org.opencontainers.image.description"] == "" {
		t.Errorf("no org.opencontainers.image.description label")
	}

	// The image is the binary and the CA bundle: nothing else came in.
	binInfo, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	caInfo, err := os.Stat(filepath.Join(context, "ca-certificates.crt"))
	if err != nil {
		t.Fatal(err)
	}
	files := binInfo.Size() + caInfo.Size()
	size := images[0].Size
	t.Logf("image %s: %.1f MiB (binary %.1f MiB, CA bundle %.0f KiB)", tag, float64(size)/(1<<20), float64(binInfo.Size())/(1<<20), float64(caInfo.Size())/(1<<10))
	if size < files || size > files+64<<10 {
		t.Errorf("image size %d bytes, want the binary and the CA bundle's %d plus at most 64 KiB of layer metadata", size, files)
	}
}
