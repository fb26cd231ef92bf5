// Package suggest finds the name a user most likely meant when they typed
// one that does not exist: a config file's field, a command-line flag, a
// command.
package suggest

// maxEdits is the most edits (insertions, deletions, substitutions) a typo
// may be from the name it is taken for.
const maxEdits = 2

// Nearest returns the name in known fewest edits from got, or "" when none
// is within two edits and fewer edits than got has bytes (so "x" is not
// taken for "c"). Of names equally near, the first in known wins.
func Nearest(got string, known []string) string {
	best, bestD := "", min(maxEdits+1, len(got))
	for _, k := range known {
		if d := editDistance(got, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
