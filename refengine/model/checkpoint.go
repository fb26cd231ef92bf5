package model

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// LoadCheckpoint reads a llama2.c checkpoint (run.c's format) and splits it
// over ranks tensor-parallel ranks.
//
// The format is little-endian: seven int32 (dim, hidden_dim, n_layers,
// n_heads, n_kv_heads, vocab_size, seq_len; a negative vocab_size means the
// classifier is stored separately), then float32 tensors in this order:
// token_embedding (vocab, dim), rms_att (layers, dim), wq (layers, dim, dim),
// wk and wv (layers, kv_dim, dim), wo (layers, dim, dim), rms_ffn (layers,
// dim), w1 (layers, hidden, dim), w2 (layers, dim, hidden), w3 (layers,
// hidden, dim), rms_final (dim), the legacy freq_cis_real and freq_cis_imag
// tables (seq_len·head_size/2 each; skipped), and wcls (vocab, dim) when not
// shared. See karpathy/llama2.c run.c, memory_map_weights.
func LoadCheckpoint(path string, ranks int) (*Model, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("model: cannot open checkpoint: %w", err)
	}
	defer f.Close()
	cfg, w, err := readCheckpoint(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("model: checkpoint %s: %w", path, err)
	}
	return build(cfg, w, ranks)
}

// CheckpointShape reads a llama2.c checkpoint's header, checks the shape,
// and checks that the file is as long as that shape needs, without reading
// the weights: the check LoadCheckpoint would fail, at the cost of one read.
func CheckpointShape(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("model: cannot open checkpoint: %w", err)
	}
	defer f.Close()
	cfg, err := readHeader(f)
	if err != nil {
		return cfg, fmt.Errorf("model: checkpoint %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		return cfg, err
	}
	if want := checkpointBytes(cfg); st.Size() < want {
		return cfg, fmt.Errorf("model: checkpoint %s: truncated: %d bytes, its header's shape needs %d", path, st.Size(), want)
	}
	return cfg, nil
}

// headerBytes is the size of a checkpoint's header: seven int32.
const headerBytes = 7 * 4

// checkpointBytes is the size of a checkpoint of shape cfg: the header, the
// weights (the classifier when not shared) and the freq_cis tables.
func checkpointBytes(cfg Config) int64 {
	return headerBytes + 4*(int64(cfg.Params())+int64(cfg.MaxSeq)*int64(cfg.HeadSize()))
}

// readHeader reads and checks a checkpoint's header.
func readHeader(r io.Reader) (Config, error) {
	var hdr [7]int32
	if err := binary.Read(r, binary.LittleEndian, &hdr); err != nil {
		return Config{}, fmt.Errorf("not a llama2.c checkpoint: cannot read its header: %w", err)
	}
	cfg := Config{
		Dim:              int(hdr[0]),
		HiddenDim:        int(hdr[1]),
		Layers:           int(hdr[2]),
		Heads:            int(hdr[3]),
		KVHeads:          int(hdr[4]),
		Vocab:            int(hdr[5]),
		MaxSeq:           int(hdr[6]),
		SharedClassifier: hdr[5] > 0,
	}
	if cfg.Vocab < 0 {
		cfg.Vocab = -cfg.Vocab
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("not a llama2.c checkpoint: %w", err)
	}
	if int64(cfg.Params()) > 1<<34 {
		return cfg, fmt.Errorf("not a llama2.c checkpoint: implausible size: %d parameters", cfg.Params())
	}
	return cfg, nil
}

func readCheckpoint(r io.Reader) (Config, *rawWeights, error) {
	cfg, err := readHeader(r)
	if err != nil {
		return cfg, nil, err
	}
	w := newRawWeights(cfg)
	for i, t := range w.tensors() {
		if err := binary.Read(r, binary.LittleEndian, t); err != nil {
			return cfg, nil, fmt.Errorf("cannot read tensor %d: %w", i, err)
		}
	}
	skip := int64(cfg.MaxSeq) * int64(cfg.HeadSize()) * 4 // freq_cis_real + freq_cis_imag
	if n, err := io.CopyN(io.Discard, r, skip); err != nil {
		return cfg, nil, fmt.Errorf("cannot skip freq_cis tables (%d of %d bytes): %w", n, skip, err)
	}
	if !cfg.SharedClassifier {
		if err := binary.Read(r, binary.LittleEndian, w.wcls); err != nil {
			return cfg, nil, fmt.Errorf("cannot read classifier: %w", err)
		}
	}
	return cfg, w, nil
}

// writeCheckpoint writes cfg and w in llama2.c's checkpoint format (the
// freq_cis tables are written as zeros; run.c ignores them).
func writeCheckpoint(dst io.Writer, cfg Config, w *rawWeights) error {
	bw := bufio.NewWriter(dst)
	vocab := int32(cfg.Vocab)
	if !cfg.SharedClassifier {
		vocab = -vocab
	}
	hdr := [7]int32{int32(cfg.Dim), int32(cfg.HiddenDim), int32(cfg.Layers), int32(cfg.Heads), int32(cfg.KVHeads), vocab, int32(cfg.MaxSeq)}
	if err := binary.Write(bw, binary.LittleEndian, hdr); err != nil {
		return err
	}
	for _, t := range w.tensors() {
		if err := binary.Write(bw, binary.LittleEndian, t); err != nil {
			return err
		}
	}
	if err := binary.Write(bw, binary.LittleEndian, make([]float32, cfg.MaxSeq*cfg.HeadSize())); err != nil {
		return err
	}
	if !cfg.SharedClassifier {
		if err := binary.Write(bw, binary.LittleEndian, w.wcls); err != nil {
			return err
		}
	}
	return bw.Flush()
}
