// Package doctest reads the tables of the repository's Markdown pages, for
// the tests that hold a page to the code it documents (the record's fields,
// the end reasons' details, the serve flags).
package doctest

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// Table returns the body rows of the first Markdown table in the file at
// path that comes after the line heading ("" for the first in the file),
// each row as its cells with the space around them trimmed. The header row
// and the rule under it are left out. It fails t when the file cannot be
// read, the heading is missing or no table follows it.
func Table(t testing.TB, path, heading string) [][]string {
	t.Helper()
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(page)
	if heading != "" {
		var ok bool
		if _, text, ok = strings.Cut(text, "\n"+heading+"\n"); !ok {
			t.Fatalf("%s: no %q heading", path, heading)
		}
	}
	var rows [][]string
	seen := 0
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "|") {
			if seen > 0 {
				break
			}
			continue
		}
		if seen++; seen <= 2 {
			continue // the header and its rule
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, cells)
	}
	if seen == 0 {
		t.Fatalf("%s: no table after %q", path, heading)
	}
	return rows
}

// FirstColumn returns, in order, the first group of every match of name in
// the first column of Table(t, path, heading): the names a page's table
// lists (`--flag`, `field`).
func FirstColumn(t testing.TB, path, heading string, name *regexp.Regexp) []string {
	t.Helper()
	var names []string
	for _, row := range Table(t, path, heading) {
		for _, m := range name.FindAllStringSubmatch(row[0], -1) {
			names = append(names, m[1])
		}
	}
	return names
}
