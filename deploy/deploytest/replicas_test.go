//go:build integration

package deploytest

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scrapeLabels are the labels a scrape adds to every series of a target:
// Prometheus' instance, and what the Prometheus Operator's PodMonitor and
// ServiceMonitor add. ttftlens' own series carry none, so a query or a rule
// that keeps one draws a line per replica.
var scrapeLabels = []string{"instance", "pod", "namespace", "container", "endpoint", "service"}

// partLabel marks, in checkAcrossReplicas' combined query, which part a
// series belongs to: "all", or the index of the replica the query was
// restricted to.
const partLabel = "replica_part"

// ownSeries finds the series selectors of a query whose name is ttftlens'
// (a name with colons is a recorded series, left alone).
var ownSeries = regexp.MustCompile(`[a-zA-Z_:]*ttftlens_[a-zA-Z0-9_:]*(\{[^}]*\})?`)

// onReplica restricts every selector of ttftlens' own series in expr to the
// scrape target instance. It reports whether expr reads any such series.
func onReplica(expr, instance string) (string, bool) {
	own := false
	out := ownSeries.ReplaceAllStringFunc(expr, func(sel string) string {
		name, matchers, _ := strings.Cut(sel, "{")
		if strings.Contains(name, ":") {
			return sel
		}
		own = true
		m := fmt.Sprintf("instance=%q", instance)
		if matchers = strings.TrimSpace(strings.TrimSuffix(matchers, "}")); matchers != "" {
			m += ", " + matchers
		}
		return name + "{" + m + "}"
	})
	return out, own
}

// notAdditive matches a query whose value over all replicas lies between
// its values on each (a ratio, a mean, a quantile, a maximum) rather than
// being their sum.
var notAdditive = regexp.MustCompile(`/|\b(histogram_quantile|quantile|max|min|avg)\b`)

// engineCounts are the engine's own counts, which every replica scraping
// that engine exports alike: a query over all replicas must count them
// once (a maximum), never add the replicas' copies up.
var engineCounts = regexp.MustCompile(`\bttftlens_upstream_(tokens_after_cancel|aborted_requests)_total\b`)

// checkAcrossReplicas evaluates expr over all replicas and restricted to
// each (the instances, their scrape targets), in one query so that all
// parts see the same samples, and checks that expr aggregates across them:
// no series carries a label the scrape added, the whole has exactly the
// series the parts have between them, and each series' value is the sum
// of the parts' (sums and counts) or lies between them (ratios, means,
// quantiles, maxima: the merged population's figure lies between its
// parts'; and the engine's counts, which each replica exports alike). A
// query that reads none of ttftlens' own series (the engine's) is left
// alone; one that reads recorded series, which cannot be restricted to a
// replica, is checked for scrape labels only.
func checkAcrossReplicas(t *testing.T, p *prometheus, what, expr string, instances []string, at time.Time) {
	t.Helper()
	if recordedName.MatchString(expr) {
		s, err := p.query(expr, at)
		if err != nil || len(s) == 0 {
			t.Errorf("%s: %v (%v)\n  query: %s", what, s, err, expr)
		}
		for _, smp := range s {
			if _, scraped := seriesKey(smp.Metric); scraped != "" {
				t.Errorf("%s: %s\n  query: %s", what, oneReplica(smp.Metric, scraped), expr)
			}
		}
		return
	}
	combined := fmt.Sprintf(`label_replace(%s, %q, "all", "", "")`, expr, partLabel)
	for i, inst := range instances {
		sub, own := onReplica(expr, inst)
		if !own {
			return
		}
		combined += fmt.Sprintf(` or label_replace(%s, %q, "%d", "", "")`, sub, partLabel, i)
	}
	s, err := p.query(combined, at)
	if err != nil {
		t.Errorf("%s: %v\n  query: %s", what, err, combined)
		return
	}
	whole := map[string]float64{}
	parts := map[string][]float64{}
	for _, smp := range s {
		key, scraped := seriesKey(smp.Metric)
		if scraped != "" {
			t.Errorf("%s: %s\n  query: %s", what, oneReplica(smp.Metric, scraped), expr)
			return
		}
		v := smp.values()
		if len(v) != 1 {
			continue
		}
		if smp.Metric[partLabel] == "all" {
			whole[key] = v[0]
		} else {
			parts[key] = append(parts[key], v[0])
		}
	}
	for key := range whole {
		if _, ok := parts[key]; !ok {
			t.Errorf("%s: series %s over all replicas is on none of them\n  query: %s", what, key, expr)
		}
	}
	additive := !notAdditive.MatchString(expr) && !engineCounts.MatchString(expr)
	for key, vs := range parts {
		w, ok := whole[key]
		if !ok {
			t.Errorf("%s: series %s of a replica is missing over all replicas\n  query: %s", what, key, expr)
			continue
		}
		if msg := aggregates(w, vs, additive); msg != "" {
			t.Errorf("%s: series %s is %v over all replicas and %v on each: %s\n  query: %s", what, key, w, vs, msg, expr)
		}
	}
}

// seriesKey is a series' labels but partLabel, sorted, as one string; it
// also returns the first scrape label the series carries ("" for none).
func seriesKey(m map[string]string) (key, scraped string) {
	var pairs []string
	for k, v := range m {
		if k == partLabel {
			continue
		}
		if scraped == "" && slices.Contains(scrapeLabels, k) {
			scraped = k
		}
		pairs = append(pairs, k+"="+strconv.Quote(v))
	}
	slices.Sort(pairs)
	return "{" + strings.Join(pairs, ", ") + "}", scraped
}

// oneReplica describes a series that carries the scrape label scraped.
func oneReplica(m map[string]string, scraped string) string {
	return fmt.Sprintf("a series carries %s=%q, a label of one replica: %v", scraped, m[scraped], m)
}

// aggregates says how whole fails to aggregate parts ("" when it does):
// their sum when additive, otherwise a value between the smallest and the
// largest of those that are numbers (a NaN part had nothing to divide).
func aggregates(whole float64, parts []float64, additive bool) string {
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b))) }
	if additive {
		sum := 0.0
		for _, v := range parts {
			sum += v
		}
		if !near(whole, sum) {
			return fmt.Sprintf("want their sum %v", sum)
		}
		return ""
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range parts {
		if !math.IsNaN(v) {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	switch {
	case math.IsInf(lo, 1):
		if !math.IsNaN(whole) {
			return "want NaN, as on every replica"
		}
	case math.IsNaN(whole) || (whole < lo && !near(whole, lo)) || (whole > hi && !near(whole, hi)):
		return fmt.Sprintf("want a value in [%v, %v]", lo, hi)
	}
	return ""
}

// perReplicaAlerts are the alerts that fire for one replica on purpose,
// with why.
var perReplicaAlerts = map[string]string{
	"TTFTLensDown":           "Prometheus cannot scrape that replica",
	"TTFTLensRecordsDropped": "a sink's queue and writer are the replica's own",
}

// recordedName matches the name of a recorded series (level:metric:ops).
var recordedName = regexp.MustCompile(`[a-zA-Z_]+:[a-zA-Z0-9_:]+`)

// trailingThreshold is an alert's final comparison with a number.
var trailingThreshold = regexp.MustCompile(`\s*(>|<|==|!=|>=|<=)\s*[-+0-9.eE()*\s]+$`)

// checkRulesAcrossReplicas holds the rules to the dashboard's standard:
// every recording rule aggregates across the replicas as
// checkAcrossReplicas checks (the value check where it reads only raw
// series), and every alert that reads raw series gives one series per
// replica only when it is about a replica (perReplicaAlerts); alerts on
// recorded series inherit their labels, checked with the recording rules.
func checkRulesAcrossReplicas(t *testing.T, p *prometheus, groups []ruleGroup, instances []string, at time.Time) {
	t.Helper()
	seen := map[string]bool{}
	for _, g := range groups {
		for _, r := range g.Rules {
			what := fmt.Sprintf("rule %s (group %s)", r.Name, g.Name)
			switch {
			case r.Type == "recording":
				checkAcrossReplicas(t, p, what, r.Query, instances, at)
			case !recordedName.MatchString(r.Query):
				// Every series the alert may fire for: its final threshold
				// relaxed.
				expr := trailingThreshold.ReplaceAllString(r.Query, " >= -Inf")
				s, err := p.query(expr, at)
				if err != nil || len(s) == 0 {
					t.Errorf("%s: %v (%v)\n  query: %s", what, s, err, expr)
					continue
				}
				_, perReplica := perReplicaAlerts[r.Name]
				instancesSeen := map[string]bool{}
				for _, smp := range s {
					_, scraped := seriesKey(smp.Metric)
					instancesSeen[smp.Metric["instance"]] = true
					if (scraped != "") != perReplica {
						t.Errorf("%s: series %v: per replica %v, want %v\n  query: %s", what, smp.Metric, scraped != "", perReplica, expr)
					}
				}
				if perReplica && len(instancesSeen) != len(instances) {
					t.Errorf("%s: series for instances %v, want one per replica (%v)", what, instancesSeen, instances)
				}
				seen[r.Name] = true
			}
		}
	}
	for name := range perReplicaAlerts {
		if !seen[name] {
			t.Errorf("alert %s: not among the rules, or not checked", name)
		}
	}
}
