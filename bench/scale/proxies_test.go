package main

import (
	"slices"
	"testing"
)

func TestProxyList(t *testing.T) {
	tests := []struct {
		proxies string
		base    bool
		want    []string
		err     bool
	}{
		{proxies: "nginx,ttftlens", want: []string{"nginx", "ttftlens"}},
		{proxies: "ttftlens, nginx", want: []string{"ttftlens", "nginx"}},
		{proxies: "nginx,ttftlens", base: true, want: []string{"nginx", "ttftlens", "ttftlens-base"}},
		{proxies: "ttftlens,nginx", base: true, want: []string{"ttftlens", "ttftlens-base", "nginx"}},
		{proxies: "nginx", base: true, want: []string{"nginx", "ttftlens-base"}},
		{proxies: "ttftlens-base,nginx,ttftlens", base: true, want: []string{"ttftlens-base", "nginx", "ttftlens"}},
		{proxies: "nginx,ttftlens-base", err: true},
		{proxies: "nginx,envoy", err: true},
		{proxies: "nginx,nginx", err: true},
		{proxies: "", err: true},
	}
	for _, tt := range tests {
		got, err := proxyList(tt.proxies, tt.base)
		if (err != nil) != tt.err || !slices.Equal(got, tt.want) {
			t.Errorf("proxyList(%q, %v) = %v, %v; want %v, error %v", tt.proxies, tt.base, got, err, tt.want, tt.err)
		}
	}
}

func TestRatioColumns(t *testing.T) {
	tests := []struct {
		names []string
		want  []string
	}{
		{[]string{"nginx", "ttftlens"}, []string{"ratio"}},
		{[]string{"ttftlens", "nginx"}, []string{"ratio"}},
		{[]string{"nginx", "ttftlens", "ttftlens-base"}, []string{"ratio", "base→head"}},
		{[]string{"ttftlens", "ttftlens-base"}, []string{"base→head"}},
		{[]string{"nginx", "ttftlens-base"}, nil},
		{[]string{"ttftlens"}, nil},
	}
	for _, tt := range tests {
		var got []string
		for _, c := range ratioColumns(tt.names) {
			got = append(got, c.header)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("ratioColumns(%v) = %v, want %v", tt.names, got, tt.want)
		}
	}
}
