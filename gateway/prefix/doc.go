// Package prefix is prefix affinity for routing: a request's prompt named
// by a chain of hashes of its leading blocks (chain.go), a bounded index of
// which upstreams last served each chain (index.go), and, for a prompt with
// no history, rendezvous hashing with bounded load (rendezvous.go).
//
// Engines keep the key-value cache of the prompts they prefilled and serve
// a later prompt that begins the same way from it (vLLM in blocks of 16
// tokens, SGLang per token in a radix tree, llama.cpp per slot). A request
// sent where its prefix was last computed skips that prefill. Nothing here
// reproduces an engine's chat template or tokenizer: the chain only has to
// name the same prompt the same way every time, so that two requests share
// a chain prefix exactly when their prompts share the text it covers.
//
// Every hash is XXH64 (xxh64.go), the same in every process and on every
// machine, so replicas agree on a prompt's chain and on the upstream its
// rendezvous hashing prefers. Nothing allocates per request, and no
// goroutine is started.
package prefix
