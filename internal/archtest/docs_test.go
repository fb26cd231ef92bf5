package archtest

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// mdLink matches an inline Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// inlineCode matches a code span, whose text is not a link.
var inlineCode = regexp.MustCompile("`[^`]*`")

// mdFiles returns the repository's Markdown files, relative to root, leaving
// out hidden directories.
func mdFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	walkRepo(t, func(path string) error {
		if filepath.Ext(path) == ".md" {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	return files
}

// mdLines returns a Markdown file's lines outside fenced code blocks, with
// code spans blanked, numbered from 1 (a fenced line is kept empty).
func mdLines(text string) []string {
	lines := strings.Split(text, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
			continue
		}
		lines[i] = inlineCode.ReplaceAllString(l, "``")
	}
	return lines
}

// slug is the anchor GitHub gives a heading: lower case, punctuation
// dropped, spaces as hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a Markdown file's headings; a repeated
// heading's anchor takes -1, -2, … as on GitHub.
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	fenced := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(l, "#"))
		s := slug(strings.ReplaceAll(h, "`", ""))
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// TestDocLinks checks that every relative link in the repository's Markdown
// files names a file or directory that exists, and, when it names a heading
// (#anchor) of a Markdown file, a heading that file has.
func TestDocLinks(t *testing.T) {
	files := mdFiles(t)
	if len(files) == 0 {
		t.Fatal("no Markdown files found")
	}
	texts := map[string]string{}
	read := func(rel string) (string, bool) {
		if s, ok := texts[rel]; ok {
			return s, true
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return "", false
		}
		texts[rel] = string(b)
		return string(b), true
	}
	for _, file := range files {
		text, _ := read(file)
		for i, line := range mdLines(text) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				rel := file
				if path != "" {
					rel = filepath.Join(filepath.Dir(file), path)
					if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
						t.Errorf("%s:%d: %s: no such file", file, i+1, target)
						continue
					}
				}
				if anchor == "" || filepath.Ext(rel) != ".md" {
					continue
				}
				if s, ok := read(rel); !ok || !anchors(s)[anchor] {
					t.Errorf("%s:%d: %s: %s has no heading #%s", file, i+1, target, rel, anchor)
				}
			}
		}
	}
}
