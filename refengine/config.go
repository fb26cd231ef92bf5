package refengine

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ttftlens/ttftlens/refengine/model"
)

// Config configures a reference engine Server. The zero value works: every
// zero field is replaced by the default documented on it (see Normalize).
type Config struct {
	// ModelPath is a llama2.c checkpoint file. Empty means the built-in,
	// untrained model (no download, starts in well under a second): with the
	// default shape its embedding and classifier hold the bigram table of the
	// built-in tokenizer's embedded corpus, so it answers in that corpus's
	// phrases, and its other weights come from Seed.
	ModelPath string
	// TokenizerPath is a llama2.c tokenizer file matching ModelPath. Empty
	// means the built-in byte-level tokenizer.
	TokenizerPath string
	// ModelConfig shapes the seeded model when ModelPath is empty. The zero
	// value means model.DefaultConfig().
	ModelConfig model.Config
	// Seed for the seeded model's weights. Default 1.
	Seed uint64
	// Ranks is the number of tensor-parallel ranks (goroutines that
	// synchronise at every layer). Default 1.
	Ranks int
	// MaxRunning is the most sequences in the running batch. Default 16.
	MaxRunning int
	// MaxBatchTokens is the most tokens computed in one scheduler step
	// (decode tokens plus prefill chunks). Default 512; raised to MaxRunning
	// if smaller, so every running sequence can always decode.
	MaxBatchTokens int
	// KVBlocks is the size of the KV cache in blocks of model.BlockSize
	// tokens. Default: enough for MaxRunning full-length sequences.
	KVBlocks int
	// TokenizerWorkers is the size of the tokenizer worker pool. A busy pool
	// queues, and the wait counts as tokenize time. Default GOMAXPROCS.
	TokenizerWorkers int
	// MediaTimeout bounds one media (image_url) fetch. Default 10s.
	MediaTimeout time.Duration
	// MediaMaxBytes bounds the size of one fetched media item. Default 20 MiB.
	MediaMaxBytes int64
	// ImageTokens is the number of placeholder prompt tokens each image
	// contributes. Default 64.
	ImageTokens int
	// DefaultMaxTokens is used when a request has no max_tokens. It is
	// capped by the room left in the context window. Default 256.
	DefaultMaxTokens int
	// ModelName is the served model id (/v1/models, "model" field, metric
	// label). Default "ttftlens-ref".
	ModelName string
	// Faults are server-wide faults in the X-Ttftlens-Fault header syntax
	// (see FAULTS.md), applied to every request; a request's header adds to
	// and overrides them when AllowFaults. Empty means none.
	Faults string
	// AllowFaults lets a request inject faults with the X-Ttftlens-Fault
	// header. Off by default, the header is ignored: a fault one client
	// injects slows every request the engine serves.
	AllowFaults bool
	// TruthCapacity is how many recent requests Truth remembers. Default 4096.
	TruthCapacity int
	// SpanShape makes the engine report its timing as a stock engine does:
	// nothing in band (no Server-Timing header, comment or trailer, no
	// progress comments) and, for each request it finishes, the
	// OpenTelemetry span that engine sends (one of SpanShapes: "vllm",
	// "sglang", "tgi"; refengine/spans.go) to Tracer. Empty means in band
	// (PROTOCOL.md).
	SpanShape string
	// Tracer makes those spans; required with SpanShape.
	Tracer trace.TracerProvider
	// Logger receives one line per finished request (request id,
	// traceparent, timings). Nil means no request log.
	Logger *slog.Logger
}

// RegisterFlags registers the configuration as kebab-case flags on fs,
// writing into c. Defaults shown are the values after Normalize.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ModelPath, "model", c.ModelPath, "llama2.c checkpoint file (empty: built-in seeded model)")
	fs.StringVar(&c.TokenizerPath, "tokenizer", c.TokenizerPath, "llama2.c tokenizer file (empty: built-in byte-level tokenizer)")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "weight seed of the built-in model (0: 1)")
	fs.IntVar(&c.Ranks, "ranks", c.Ranks, "tensor-parallel ranks (0: 1)")
	fs.IntVar(&c.MaxRunning, "max-running", c.MaxRunning, "most sequences in the running batch (0: 16)")
	fs.IntVar(&c.MaxBatchTokens, "max-batch-tokens", c.MaxBatchTokens, "most tokens per scheduler step (0: 512)")
	fs.IntVar(&c.KVBlocks, "kv-blocks", c.KVBlocks, "KV cache size in blocks of 16 tokens (0: max-running full-length sequences)")
	fs.IntVar(&c.TokenizerWorkers, "tokenizer-workers", c.TokenizerWorkers, "tokenizer worker pool size (0: GOMAXPROCS)")
	fs.DurationVar(&c.MediaTimeout, "media-timeout", c.MediaTimeout, "timeout of one image_url fetch (0: 10s)")
	fs.Int64Var(&c.MediaMaxBytes, "media-max-bytes", c.MediaMaxBytes, "size limit of one image_url fetch (0: 20 MiB)")
	fs.IntVar(&c.ImageTokens, "image-tokens", c.ImageTokens, "placeholder prompt tokens per image (0: 64)")
	fs.IntVar(&c.DefaultMaxTokens, "default-max-tokens", c.DefaultMaxTokens, "max_tokens when a request has none (0: 256)")
	fs.StringVar(&c.ModelName, "served-model-name", c.ModelName, "model id served (empty: ttftlens-ref)")
	fs.StringVar(&c.Faults, "fault", c.Faults, "server-wide faults, e.g. queue_delay=200ms,slow_tokenizer=50ms (see refengine/FAULTS.md)")
	fs.IntVar(&c.TruthCapacity, "truth-capacity", c.TruthCapacity, "recent requests kept for ground truth (0: 4096)")
}

// Normalize fills zero fields with their defaults. It does not validate.
func (c *Config) Normalize() {
	if c.ModelConfig == (model.Config{}) {
		c.ModelConfig = model.DefaultConfig()
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Ranks == 0 {
		c.Ranks = 1
	}
	if c.MaxRunning == 0 {
		c.MaxRunning = 16
	}
	if c.MaxBatchTokens == 0 {
		c.MaxBatchTokens = 512
	}
	// Every running sequence must be able to decode one token per step.
	if c.MaxBatchTokens < c.MaxRunning {
		c.MaxBatchTokens = c.MaxRunning
	}
	if c.TokenizerWorkers == 0 {
		c.TokenizerWorkers = runtime.GOMAXPROCS(0)
	}
	if c.MediaTimeout == 0 {
		c.MediaTimeout = 10 * time.Second
	}
	if c.MediaMaxBytes == 0 {
		c.MediaMaxBytes = 20 << 20
	}
	if c.ImageTokens == 0 {
		c.ImageTokens = 64
	}
	if c.DefaultMaxTokens == 0 {
		c.DefaultMaxTokens = 256
	}
	if c.ModelName == "" {
		c.ModelName = "ttftlens-ref"
	}
	if c.TruthCapacity == 0 {
		c.TruthCapacity = 4096
	}
}

// Validate reports contradictions in a normalized Config.
func (c *Config) Validate() error {
	var errs []error
	for _, v := range []struct {
		name string
		n    int64
	}{
		{"ranks", int64(c.Ranks)}, {"max-running", int64(c.MaxRunning)}, {"max-batch-tokens", int64(c.MaxBatchTokens)},
		{"tokenizer-workers", int64(c.TokenizerWorkers)}, {"media-timeout", int64(c.MediaTimeout)},
		{"media-max-bytes", c.MediaMaxBytes}, {"image-tokens", int64(c.ImageTokens)},
		{"default-max-tokens", int64(c.DefaultMaxTokens)}, {"truth-capacity", int64(c.TruthCapacity)},
	} {
		if v.n < 0 {
			errs = append(errs, fmt.Errorf("%s is negative (0 means the default)", v.name))
		}
	}
	if c.TokenizerPath != "" && c.ModelPath == "" {
		errs = append(errs, errors.New("a tokenizer file given without a model file"))
	}
	if c.SpanShape != "" && !slices.Contains(SpanShapes, c.SpanShape) {
		errs = append(errs, fmt.Errorf("span shape %q: want one of %s", c.SpanShape, strings.Join(SpanShapes, ", ")))
	}
	if c.SpanShape != "" && c.Tracer == nil {
		errs = append(errs, errors.New("a span shape without a tracer to send the spans with"))
	}
	if _, err := ParseFaults(c.Faults); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
