package deploytest

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// manifest is the part of a Kubernetes object the check reads.
type manifest struct {
	Kind     string                `yaml:"kind"`
	Metadata struct{ Name string } `yaml:"metadata"`
	Data     map[string]string     `yaml:"data"`
	Spec     struct {
		Template struct {
			Spec struct {
				Containers []struct {
					Name  string   `yaml:"name"`
					Image string   `yaml:"image"`
					Args  []string `yaml:"args"`
					Env   []struct {
						Name string `yaml:"name"`
					} `yaml:"env"`
					VolumeMounts []struct {
						Name      string `yaml:"name"`
						MountPath string `yaml:"mountPath"`
					} `yaml:"volumeMounts"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

func readManifests(t *testing.T, path string) []manifest {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []manifest
	dec := yaml.NewDecoder(f)
	for {
		var m manifest
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, m)
	}
}

// TestKubernetesManifests runs the real binary's --check-config on every
// ttftlens container's args in deploy/kubernetes, with the ConfigMaps they
// mount written where they mount them and their environment set: a flag
// that does not exist, a bad value, or a config file the gateway rejects
// fails here, not in someone's cluster.
func TestKubernetesManifests(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "ttftlens")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/ttftlens")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	files, _ := filepath.Glob("../kubernetes/*.yaml")
	if len(files) < 2 {
		t.Fatalf("found %d manifests", len(files))
	}
	checked := 0
	for _, file := range files {
		docs := readManifests(t, file)
		configMaps := map[string]map[string]string{}
		for _, m := range docs {
			if m.Kind == "ConfigMap" {
				configMaps[m.Metadata.Name] = m.Data
			}
		}
		for _, m := range docs {
			for _, c := range m.Spec.Template.Spec.Containers {
				if c.Name != "ttftlens" {
					continue
				}
				t.Run(filepath.Base(file)+"/"+m.Metadata.Name, func(t *testing.T) {
					root := t.TempDir()
					args := append([]string{}, c.Args...)
					// Mounted config files land under root; the args follow.
					for _, vm := range c.VolumeMounts {
						for _, data := range configMaps {
							for name, content := range data {
								dir := filepath.Join(root, vm.MountPath)
								os.MkdirAll(dir, 0o755)
								os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)
							}
						}
						for i, a := range args {
							args[i] = strings.Replace(a, "="+vm.MountPath, "="+filepath.Join(root, vm.MountPath), 1)
						}
					}
					cmd := exec.Command(bin, append(args, "--check-config")...)
					cmd.Env = os.Environ()
					for _, e := range c.Env {
						cmd.Env = append(cmd.Env, e.Name+"=secret-"+e.Name)
					}
					var out bytes.Buffer
					cmd.Stdout, cmd.Stderr = &out, &out
					if err := cmd.Run(); err != nil {
						t.Fatalf("ttftlens %s --check-config: %v\n%s", strings.Join(args, " "), err, out.String())
					}
					if !strings.Contains(out.String(), "flags ok") {
						t.Errorf("unexpected output: %s", out.String())
					}
				})
				checked++
			}
		}
	}
	if checked < 2 {
		t.Errorf("checked %d ttftlens containers, want the sidecar's and the gateway's", checked)
	}
}
