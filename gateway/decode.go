package gateway

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ttftlens/ttftlens/internal/suggest"
)

// Load reads and parses the config file at path (see Parse).
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(data, path)
}

// Parse decodes a YAML config, validates it and fills its defaults. name is
// the file name errors start with. Every error names the line and the
// field, e.g. `config.yaml:12: routes[1].pool: unknown pool "gpu-b"`; an
// unknown field is an error, so a typo never passes silently. When there is
// more than one problem, each is on its own line, in file order.
func Parse(data []byte, name string) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, syntaxError(name, err)
	}
	c := &Config{file: name, lines: map[string]int{}}
	if root.Kind == 0 || len(root.Content) == 0 {
		return nil, &ConfigError{File: name, Line: 1, Msg: "empty config"}
	}
	d := decoder{c: c, budget: 2*len(data) + 1024}
	d.decode(root.Content[0], "", reflect.ValueOf(c).Elem())
	if err := d.errs.err(); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c.Normalize()
	return c, nil
}

// ConfigError is one problem in a config file.
type ConfigError struct {
	File  string // "" for a Config built in code
	Line  int    // 0 when unknown
	Field string // the field's path, e.g. routes[1].pool ("" for the file)
	Msg   string
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteString(":")
			b.WriteString(strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ConfigErrors is every problem found, in file order. errors.As finds the
// *ConfigError of the first.
type ConfigErrors []*ConfigError

func (es ConfigErrors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap returns the problems as errors.
func (es ConfigErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

type errorList []*ConfigError

func (l *errorList) add(file string, line int, field, msg string) {
	*l = append(*l, &ConfigError{File: file, Line: line, Field: field, Msg: msg})
}

func (l errorList) err() error {
	switch len(l) {
	case 0:
		return nil
	case 1:
		return l[0]
	}
	out := slices.Clone(l)
	slices.SortStableFunc(out, func(a, b *ConfigError) int { return a.Line - b.Line })
	return ConfigErrors(out)
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError rewrites yaml.v3's "yaml: line N: msg" as "file:N: msg".
func syntaxError(file string, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		err = errors.New(te.Errors[0])
	}
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return &ConfigError{File: file, Line: n, Msg: m[2]}
	}
	return &ConfigError{File: file, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
}

// decoder fills Go values from a yaml.Node tree, recording the line of
// every field path. It is strict: unknown or repeated fields and values of
// the wrong kind are errors. It knows the types Config uses: structs,
// pointers to structs and scalars, slices, string, int, bool and
// time.Duration.
type decoder struct {
	c    *Config
	errs errorList
	// budget bounds the values decoded: aliases may repeat a list inside
	// a list, so a small file could otherwise expand quadratically.
	budget int
}

func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	d.errs.add(d.c.file, n.Line, path, fmt.Sprintf(format, args...))
}

var durationType = reflect.TypeFor[time.Duration]()

func (d *decoder) decode(n *yaml.Node, path string, v reflect.Value) {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if d.budget--; d.budget < 0 {
		if d.budget == -1 {
			d.fail(n, path, "too many values after expanding aliases")
		}
		return
	}
	if _, seen := d.c.lines[path]; !seen {
		d.c.lines[path] = n.Line
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an empty value leaves the zero value: the default
	}
	if v.Type() == durationType {
		d.duration(n, path, v)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		e := reflect.New(v.Type().Elem())
		d.decode(n, path, e.Elem())
		v.Set(e)
	case reflect.Struct:
		d.mapping(n, path, v)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(n, path, "want a list, got %s", kindName(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, e := range n.Content {
			d.decode(e, fmt.Sprintf("%s[%d]", path, i), s.Index(i))
		}
		v.Set(s)
	case reflect.String:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			d.fail(n, path, "want a string, got %s", kindName(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Int:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			d.fail(n, path, "want an integer, got %s", kindName(n))
			return
		}
		i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err != nil || int64(int(i)) != i {
			d.fail(n, path, "integer %s out of range", n.Value)
			return
		}
		v.SetInt(i)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			d.fail(n, path, "want true or false, got %s", kindName(n))
			return
		}
		b, err := strconv.ParseBool(strings.ToLower(n.Value))
		if err != nil {
			d.fail(n, path, "want true or false, got %q", n.Value)
			return
		}
		v.SetBool(b)
	default:
		panic("BUG: gateway config decoder cannot decode " + v.Type().String())
	}
}

func (d *decoder) duration(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "want a duration such as 1.5s or 2m, got %s", kindName(n))
		return
	}
	if n.Tag == "!!int" && n.Value == "0" {
		return
	}
	dur, err := time.ParseDuration(n.Value)
	if err != nil {
		d.fail(n, path, "want a duration such as 1.5s or 2m, got %q", n.Value)
		return
	}
	v.SetInt(int64(dur))
}

func (d *decoder) mapping(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a mapping, got %s", kindName(n))
		return
	}
	fields := structFields(v.Type())
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		p := kn.Value
		if path != "" {
			p = path + "." + kn.Value
		}
		idx, ok := fields.index[kn.Value]
		if !ok {
			d.fail(kn, p, "unknown field%s (known: %s)", didYouMean(kn.Value, fields.names), strings.Join(fields.names, ", "))
			continue
		}
		if seen[kn.Value] {
			d.fail(kn, p, "repeated field")
			continue
		}
		seen[kn.Value] = true
		d.c.lines[p] = kn.Line
		d.decode(vn, p, v.Field(idx))
	}
}

type fieldSet struct {
	index map[string]int
	names []string
}

func structFields(t reflect.Type) fieldSet {
	fs := fieldSet{index: map[string]int{}}
	for i := range t.NumField() {
		tag := t.Field(i).Tag.Get("yaml")
		if tag == "" || tag == "-" {
			continue
		}
		fs.index[tag] = i
		fs.names = append(fs.names, tag)
	}
	return fs
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str":
			return fmt.Sprintf("string %q", n.Value)
		case "!!int", "!!float":
			return "number " + n.Value
		case "!!bool":
			return n.Value
		}
		return n.Value
	}
	return "nothing"
}

// didYouMean returns ` (did you mean "x"?)` when a known name is near got
// (suggest.Nearest).
func didYouMean(got string, known []string) string {
	best := suggest.Nearest(got, known)
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}
