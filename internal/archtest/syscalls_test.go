package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// sockPkg is the one package that makes system calls of its own.
const sockPkg = "internal/sock"

// syscallConstant is what code outside internal/sock may use of package
// syscall: an errno (syscall.ECONNRESET) or a signal (syscall.SIGTERM), to
// name what happened, never to make a call.
var syscallConstant = regexp.MustCompile(`^(E[A-Z0-9]+|SIG[A-Z0-9]+)$`)

// TestSystemCallsInSock holds every Go file outside internal/sock to
// ARCHITECTURE.md's rule: no golang.org/x/sys/unix, no unsafe, and of
// syscall only its errno and signal constants. Test files may also set up
// what the code under test meets with syscall (a socket option, a port
// bound but not listening, the process's CPU time), never with unix or
// unsafe.
func TestSystemCallsInSock(t *testing.T) {
	fset := token.NewFileSet()
	walkRepo(t, func(path string) error {
		if !goSource(path) {
			return nil
		}
		name := filepath.Base(path)
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		if pkg == sockPkg || strings.HasPrefix(pkg, sockPkg+"/") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		isTest := strings.HasSuffix(name, "_test.go")
		sys := ""
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			switch p {
			case "golang.org/x/sys/unix", "unsafe":
				t.Errorf("%s imports %s: system calls and memory tricks live in %s", path, p, sockPkg)
			case "syscall":
				sys = "syscall"
				if imp.Name != nil {
					sys = imp.Name.Name
				}
			}
		}
		if sys == "" || isTest {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == sys && !syscallConstant.MatchString(sel.Sel.Name) {
				t.Errorf("%s: syscall.%s: outside %s, syscall names errnos and signals only", fset.Position(sel.Pos()), sel.Sel.Name, sockPkg)
			}
			return true
		})
		return nil
	})
}
