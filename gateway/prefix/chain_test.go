package prefix

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

// chat returns the chain and lead of a messages value written as JSON.
func chat(t testing.TB, messages string) ([]uint64, int) {
	t.Helper()
	var p fastjson.Parser
	v, err := p.Parse(messages)
	if err != nil {
		t.Fatalf("%s: %v", messages, err)
	}
	return AppendChat(nil, 0, v)
}

// prompt returns the chain and lead of a prompt value written as JSON.
func prompt(t testing.TB, value string) ([]uint64, int) {
	t.Helper()
	var p fastjson.Parser
	v, err := p.Parse(value)
	if err != nil {
		t.Fatalf("%s: %v", value, err)
	}
	return AppendPrompt(nil, 0, v)
}

// msg is a message object with a string content.
func msg(role, content string) string {
	return `{"role":` + strconv.Quote(role) + `,"content":` + strconv.Quote(content) + `}`
}

func list(msgs ...string) string { return "[" + strings.Join(msgs, ",") + "]" }

// blocks is how many blocks a message of role and content bytes takes:
// the two tags, the role, the content.
func blocks(role string, content int) int {
	return (2 + len(role) + content + BlockBytes - 1) / BlockBytes
}

// shared is how many leading hashes a and b have in common.
func shared(a, b []uint64) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

var (
	system  = strings.Repeat("You are a careful assistant. ", 20) // 580 bytes
	system2 = strings.Repeat("You are a terse assistant.   ", 20)
)

// TestChatChains: how two requests' chains relate follows from what their
// prompts share.
func TestChatChains(t *testing.T) {
	sys := msg("system", system)
	sysBlocks := blocks("system", len(system))
	for _, tc := range []struct {
		name   string
		a, b   string
		shared int  // leading hashes in common
		equal  bool // the chains are equal (shared is then their length)
	}{
		{"same system prompt, other question", list(sys, msg("user", "What is 2+2?")), list(sys, msg("user", "Name a prime.")), sysBlocks, false},
		{"other system prompt", list(msg("system", system2), msg("user", "hi")), list(sys, msg("user", "hi")), 0, false},
		{"later turn extends the earlier", list(sys, msg("user", "hi")), list(sys, msg("user", "hi"), msg("assistant", "Hello."), msg("user", "Bye.")), sysBlocks + 1, false},
		{"content string and one text part", list(msg("user", "hi there")), `[{"role":"user","content":[{"type":"text","text":"hi there"}]}]`, 1, true},
		{"text parts back to back", `[{"role":"user","content":[{"type":"text","text":"hi "},{"text":"there"}]}]`, list(msg("user", "hi there")), 1, true},
		{"escaped and raw text", `[{"role":"user","content":"caf\u00e9 \"au lait\""}]`, list(msg("user", `café "au lait"`)), 1, true},
		{"key order", `[{"content":"hi","role":"user"}]`, list(msg("user", "hi")), 1, true},
		{"null content and none", `[{"role":"assistant","content":null}]`, `[{"role":"assistant"}]`, 1, true},
		{"other role", list(msg("user", "hi")), list(msg("system", "hi")), 0, false},
		{"bytes moved across fields", list(msg("user", "xhi")), list(msg("userx", "hi")), 0, false},
		{"an image part ends the chain", list(sys, `{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"data:a"}}]}`), list(sys, `{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"data:b"}}]}`, msg("user", "more")), sysBlocks + 1, true},
		{"a message not an object ends the chain", list(sys, `"hi"`, msg("user", "a")), list(sys, `7`, msg("user", "b")), sysBlocks, true},
		{"tool call arguments", list(sys, `{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]}`), list(sys, `{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"x\":2}"}}]}`), sysBlocks, false},
		{"tool call ids are not the prompt", list(`{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"}}]}`), list(`{"role":"assistant","tool_calls":[{"id":"b","function":{"name":"f","arguments":"{}"}}]}`), 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := chat(t, tc.a)
			b, _ := chat(t, tc.b)
			if got := shared(a, b); got != tc.shared {
				t.Errorf("%d hashes shared, want %d (lengths %d, %d)", got, tc.shared, len(a), len(b))
			}
			if eq := slices.Equal(a, b); eq != tc.equal {
				t.Errorf("chains equal: %v, want %v (lengths %d, %d)", eq, tc.equal, len(a), len(b))
			}
		})
	}
}

// TestChatLead: lead counts the first message's hashes, and the hash it
// ends on names the first message whatever follows.
func TestChatLead(t *testing.T) {
	long := strings.Repeat("x", 6000)
	for _, tc := range []struct {
		name     string
		messages string
		lead     int
	}{
		{"system prompt", list(msg("system", system), msg("user", "hi")), blocks("system", len(system))},
		{"1,500-token system prompt", list(msg("system", long), msg("user", "hi")), blocks("system", len(long))},
		{"first message over the bound", list(msg("system", strings.Repeat("x", 20000)), msg("user", "hi")), MaxBlocks},
		{"one message", list(msg("user", "hi")), 1},
		{"not an array", `{"role":"user"}`, 0},
		{"empty", `[]`, 0},
		{"first message not an object", `["hi"]`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, lead := chat(t, tc.messages)
			if lead != tc.lead {
				t.Errorf("lead %d, want %d (chain of %d)", lead, tc.lead, len(c))
			}
		})
	}
}

// TestChainBound: a chain stops at MaxBlocks, however the prompt is long.
func TestChainBound(t *testing.T) {
	var many []string
	for i := range 2 * MaxBlocks {
		many = append(many, msg("user", strconv.Itoa(i)))
	}
	for _, tc := range []struct {
		name, messages string
	}{
		{"one long message", list(msg("user", strings.Repeat("abcdefgh", 4096)))},
		{"many short messages", list(many...)},
		{"just over", list(msg("user", strings.Repeat("a", MaxBlocks*BlockBytes)))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, _ := chat(t, tc.messages); len(c) != MaxBlocks {
				t.Errorf("chain of %d hashes, want %d", len(c), MaxBlocks)
			}
		})
	}
	// Just under: the tags and role fill the last block's room exactly.
	under := list(msg("user", strings.Repeat("a", MaxBlocks*BlockBytes-2-len("user"))))
	if c, _ := chat(t, under); len(c) != MaxBlocks {
		t.Errorf("a prompt of exactly %d blocks: chain of %d", MaxBlocks, len(c))
	}
}

// TestAppendKeepsDst: the chain is appended after what dst holds, and a
// seed separates chains.
func TestAppendKeepsDst(t *testing.T) {
	v := fastjson.MustParse(list(msg("user", "hi")))
	c, lead := AppendChat([]uint64{7, 8}, 0, v)
	if len(c) != 3 || c[0] != 7 || c[1] != 8 || lead != 1 {
		t.Fatalf("AppendChat onto [7 8] = %v, lead %d", c, lead)
	}
	plain, _ := AppendChat(nil, 0, v)
	seeded, _ := AppendChat(nil, Hash([]byte("model-a")), v)
	if c[2] != plain[0] || seeded[0] == plain[0] {
		t.Errorf("chain %x onto dst, %x alone, %x seeded", c[2], plain[0], seeded[0])
	}
}

// TestPromptChains: a completions prompt as a string, token ids (16 to a
// block) or a batch (its first prompt).
func TestPromptChains(t *testing.T) {
	ids := func(n int) string {
		s := make([]string, n)
		for i := range s {
			s[i] = strconv.Itoa(1000 + i)
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	for _, tc := range []struct {
		name   string
		a, b   string
		blocks int  // len(a's chain)
		equal  bool // a's chain is b's
	}{
		{"a string", strconv.Quote(system), strconv.Quote(system + "?"), (len(system) + BlockBytes - 1) / BlockBytes, false},
		{"16 token ids a block", ids(32), ids(33), 2, false},
		{"a batch is its first prompt", `["one","two"]`, `"one"`, 1, true},
		{"a batch of token arrays", "[" + ids(20) + ",[1]]", ids(20), 2, true},
		{"a value not a token id ends the chain", `[1,2,"x",3]`, `[1,2]`, 1, true},
		{"a token id over 32 bits ends the chain", `[1,2,4294967296]`, `[1,2]`, 1, true},
		{"empty", `[]`, `""`, 0, true},
		{"not a prompt", `{"a":1}`, `7`, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, lead := prompt(t, tc.a)
			b, _ := prompt(t, tc.b)
			if len(a) != tc.blocks || lead != len(a) {
				t.Errorf("chain of %d, lead %d; want %d for both", len(a), lead, tc.blocks)
			}
			if eq := slices.Equal(a, b); eq != tc.equal {
				t.Errorf("chains equal: %v, want %v", eq, tc.equal)
			}
		})
	}
	long, _ := prompt(t, strconv.Quote(strings.Repeat("y", 64*1024)))
	if len(long) != MaxBlocks {
		t.Errorf("a 64 KiB prompt: chain of %d, want %d", len(long), MaxBlocks)
	}
}

// FuzzChain: any JSON value as messages or prompt: no panic, a chain within
// the bound, the same chain from a second parse.
func FuzzChain(f *testing.F) {
	for _, s := range []string{
		list(msg("system", system), msg("user", "hi")),
		`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"}]}]`,
		`[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}]`,
		`[1,2,3]`, `[[1,2],[3]]`, `["a","b"]`, `"text"`, `null`, `[{"content":{"x":[]}}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v1, err := fastjson.ParseBytes(data)
		if err != nil {
			return
		}
		v2 := fastjson.MustParseBytes(data)
		c1, l1 := AppendChat(nil, 1, v1)
		c2, l2 := AppendChat(nil, 1, v2)
		if !slices.Equal(c1, c2) || l1 != l2 {
			t.Fatalf("AppendChat differs between two parses of %q", data)
		}
		if len(c1) > MaxBlocks || l1 < 0 || l1 > len(c1) {
			t.Fatalf("AppendChat: chain of %d, lead %d", len(c1), l1)
		}
		p1c, _ := AppendPrompt(nil, 1, v1)
		p2c, _ := AppendPrompt(nil, 1, v2)
		if !slices.Equal(p1c, p2c) || len(p1c) > MaxBlocks {
			t.Fatalf("AppendPrompt: chains %d and %d long, or differ, for %q", len(p1c), len(p2c), data)
		}
	})
}
