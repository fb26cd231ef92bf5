package refengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ttftlens/ttftlens/refengine/model"
)

// errClosed is returned by stages when the server is shutting down.
var errClosed = errors.New("engine closed")

// tokJob is one text to encode. res is buffered so a worker never blocks on
// a handler that gave up waiting.
type tokJob struct {
	text  string
	extra time.Duration // slow_tokenizer fault: held by the worker
	res   chan []int
}

// tokenizerPool encodes prompts on a fixed number of worker goroutines. When
// all workers are busy, jobs queue; the wait is part of tokenize time.
type tokenizerPool struct {
	tok  model.Tokenizer
	jobs chan tokJob
	stop chan struct{}
	wg   sync.WaitGroup
}

func newTokenizerPool(tok model.Tokenizer, workers int) *tokenizerPool {
	p := &tokenizerPool{tok: tok, jobs: make(chan tokJob), stop: make(chan struct{})}
	for range workers {
		p.wg.Go(p.worker)
	}
	return p
}

func (p *tokenizerPool) worker() {
	for {
		select {
		case <-p.stop:
			return
		case j := <-p.jobs:
			if j.extra > 0 {
				t := time.NewTimer(j.extra)
				select {
				case <-t.C:
				case <-p.stop:
					t.Stop()
				}
			}
			j.res <- p.tok.Encode(j.text)
		}
	}
}

// encode tokenizes text on a worker, waiting for a free one. It returns
// ctx.Err() if ctx ends first and errClosed if the pool stops.
func (p *tokenizerPool) encode(ctx context.Context, text string, extra time.Duration) ([]int, error) {
	j := tokJob{text: text, extra: extra, res: make(chan []int, 1)}
	select {
	case p.jobs <- j:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.stop:
		return nil, errClosed
	}
	select {
	case ids := <-j.res:
		return ids, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.stop:
		return nil, errClosed
	}
}

func (p *tokenizerPool) close() {
	close(p.stop)
	p.wg.Wait()
}

// Chat template. Each message becomes
//
//	<|role|>\ncontent\n
//
// and the prompt ends with "<|assistant|>\n" for the model to continue.
// Image parts are cut out of the text at their position and replaced by
// placeholder tokens after tokenization (see renderChat). The template is
// deliberately simple and documented so that clients can count tokens.
const assistantPrefix = "<|assistant|>\n"

// promptPart is a piece of a rendered prompt: text to tokenize, or an image
// whose placeholder tokens go in its place.
type promptPart struct {
	text  string
	image []byte // non-nil for an image part
}

// renderChat applies the chat template to messages. Adjacent text is merged
// so that a text-only conversation is a single part.
func renderChat(msgs []chatMessage) []promptPart {
	var parts []promptPart
	var sb strings.Builder
	flush := func() {
		if sb.Len() > 0 {
			parts = append(parts, promptPart{text: sb.String()})
			sb.Reset()
		}
	}
	for _, m := range msgs {
		sb.WriteString("<|")
		sb.WriteString(m.Role)
		sb.WriteString("|>\n")
		for _, c := range m.parts {
			if c.image != nil {
				flush()
				parts = append(parts, promptPart{image: c.image})
				continue
			}
			sb.WriteString(c.text)
		}
		sb.WriteString("\n")
	}
	sb.WriteString(assistantPrefix)
	flush()
	return parts
}

// imageTokens returns n placeholder token ids derived from the image bytes
// (FNV-1a), so different images never share a prefix-cache entry while the
// same image does.
func imageTokens(img []byte, n, vocab int) []int {
	h := uint64(14695981039346656037)
	for _, c := range img {
		h ^= uint64(c)
		h *= 1099511628211
	}
	ids := make([]int, n)
	for i := range ids {
		h ^= uint64(i)
		h *= 1099511628211
		ids[i] = int(h % uint64(vocab))
	}
	return ids
}

// ChatPromptTokens returns the prompt s computes for a chat request whose
// "messages" are msgs (their JSON, text parts only): BOS, then the chat
// template's rendering, tokenized. A client counting the prefix-cache
// blocks two prompts share counts them on these.
func (s *Server) ChatPromptTokens(msgs []byte) ([]int, error) {
	var m []chatMessage
	if err := json.Unmarshal(msgs, &m); err != nil {
		return nil, fmt.Errorf("messages: %w", err)
	}
	for _, msg := range m {
		for _, c := range msg.parts {
			if c.imageURL != "" {
				return nil, errors.New("messages: an image part needs the media stage")
			}
		}
	}
	prompt := []int{s.tok.BOS()}
	for _, p := range renderChat(m) {
		prompt = append(prompt, s.tok.Encode(p.text)...)
	}
	return prompt, nil
}
