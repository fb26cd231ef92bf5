package archtest

import (
	"bufio"
	"go/parser"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/ttftlens/ttftlens/"

// root is the repository's root, from this package's directory.
var root = filepath.Join("..", "..")

// rule is one row of ARCHITECTURE.md's package table.
type rule struct {
	stdlibOnly bool     // "(standard library only)"
	any        bool     // "any"
	allowed    []string // project packages it may import
	forTests   []string // project packages its tests may also import
}

// readRules parses the package table:
// | `pkg` | job | may import | its tests may also import |.
func readRules(t *testing.T) map[string]rule {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rules := map[string]rule{}
	inTable := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "| package | its one job | may import | its tests may also import |") {
			inTable = true
			continue
		}
		if !inTable {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 4 || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
			continue
		}
		pkg := strings.Trim(strings.TrimSpace(cells[0]), "`")
		imports := strings.TrimSpace(cells[2])
		var r rule
		switch imports {
		case "(standard library only)":
			r.stdlibOnly = true
		case "(no project package)":
		case "any":
			r.any = true
		default:
			r.allowed = packageList(imports)
		}
		r.forTests = packageList(cells[3])
		rules[pkg] = r
	}
	if len(rules) == 0 {
		t.Fatal("ARCHITECTURE.md: no package table found")
	}
	return rules
}

// packageList parses a cell's list of packages: `a`, `b`.
func packageList(cell string) []string {
	var pkgs []string
	for _, p := range strings.Split(cell, ",") {
		if p = strings.Trim(strings.TrimSpace(p), "`"); p != "" {
			pkgs = append(pkgs, p)
		}
	}
	return pkgs
}

// packages maps each package directory (relative, slash-separated) to its
// Go files, tests (and their external test packages) included, whatever
// their build constraints.
func packages(t *testing.T) map[string][]string {
	t.Helper()
	pkgs := map[string][]string{}
	walkRepo(t, func(path string) error {
		if goSource(path) {
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			rel = filepath.ToSlash(rel)
			pkgs[rel] = append(pkgs[rel], path)
		}
		return nil
	})
	return pkgs
}

// walkRepo calls fn with the path of every file below root, leaving out
// hidden directories; an error from fn stops the walk and fails t.
func walkRepo(t *testing.T, fn func(path string) error) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		return fn(path)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// goSource reports whether path is a Go file of a package: not one a test
// keeps in testdata.
func goSource(path string) bool {
	return strings.HasSuffix(path, ".go") && !slices.Contains(strings.Split(filepath.ToSlash(path), "/"), "testdata")
}

// TestImportRules checks every package's imports against its row of
// ARCHITECTURE.md's table, its tests' against the row's two lists, and
// that every package has a row.
func TestImportRules(t *testing.T) {
	rules := readRules(t)
	fset := token.NewFileSet()
	for pkg, files := range packages(t) {
		r, ok := rules[pkg]
		if !ok {
			t.Errorf("package %s has no row in ARCHITECTURE.md's package table", pkg)
			continue
		}
		if r.any {
			continue
		}
		// A test may also import its own package (package x_test).
		testAllowed := slices.Concat(r.allowed, r.forTests, []string{pkg})
		for _, file := range files {
			f, err := parser.ParseFile(fset, file, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			allowed, whose := r.allowed, pkg
			if strings.HasSuffix(file, "_test.go") {
				allowed, whose = testAllowed, "the tests of "+pkg
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				first, _, _ := strings.Cut(path, "/")
				dep, project := strings.CutPrefix(path, module)
				switch {
				case !strings.Contains(first, "."):
					// the standard library
				case project && slices.Contains(allowed, dep):
				case r.stdlibOnly:
					t.Errorf("%s imports %s; ARCHITECTURE.md allows %s only the standard library", file, path, whose)
				case project:
					t.Errorf("%s imports %s; ARCHITECTURE.md allows %s only %v", file, dep, whose, allowed)
				}
			}
		}
	}
	for pkg := range rules {
		if _, ok := packages(t)[pkg]; !ok {
			t.Errorf("ARCHITECTURE.md lists %s, which has no Go files", pkg)
		}
	}
}

// engineIdents are the names of engine specifics that only proxy/engines
// may use.
var engineIdents = regexp.MustCompile(`^(Kind(Reference|VLLM|LlamaCpp|Ollama|SGLang|TGI|Anthropic)|FaultHeader|WithholdsHeaders|ParseServerTiming|ServerTimingPrefix|PhasePrefix|ParsePhase|InferQueue|EnsureIncludeUsage)$`)

// engineStrings are engine specifics in string literals.
var engineStrings = regexp.MustCompile(`(?i)vllm|sglang|llama|ollama|\btgi\b|anthropic|x-ttftlens-fault|hold_headers|ttftlens-phase|server-timing `)

// TestProxyCoreKnowsNoEngine scans the proxy core's code (not its comments)
// for engine-specific names and strings: they belong in proxy/engines.
func TestProxyCoreKnowsNoEngine(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root, "proxy", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no proxy files: %v", err)
	}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		var s scanner.Scanner
		s.Init(fset.AddFile(file, -1, len(src)), src, nil, 0)
		for {
			pos, tok, lit := s.Scan()
			if tok == token.EOF {
				break
			}
			if (tok == token.IDENT && engineIdents.MatchString(lit)) || (tok == token.STRING && engineStrings.MatchString(lit)) {
				t.Errorf("%s: %s in the proxy core; engine specifics belong in proxy/engines", fset.Position(pos), lit)
			}
		}
	}
}

// outside are references to documents that are not part of the repository.
var outside = regexp.MustCompile(`DESIGN §|DESIGN\.md|\.\./shared|research (note )?§|engine-signals\.md|fasthttp-streaming\.md|peers\.md|\b[Ii]ssue [0-9]`)

// TestNoPointersOutside checks that no comment or document points at a file
// outside the repository (design notes and issues that a reader of the
// repository does not have).
func TestNoPointersOutside(t *testing.T) {
	self, _ := filepath.Abs("arch_test.go")
	walkRepo(t, func(path string) error {
		switch filepath.Ext(path) {
		case ".go", ".md", ".yaml", ".yml", ".json", ".sh", ".txt", "":
		default:
			return nil
		}
		if abs, _ := filepath.Abs(path); abs == self {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			if m := outside.FindString(line); m != "" {
				t.Errorf("%s:%d: %q points outside the repository", path, i+1, m)
			}
		}
		return nil
	})
}
