package exporters

import (
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Native buckets of the per-event histograms. The bucket factor 1.1 of
// histOpts is schema 3 (8 buckets per power of two); its boundaries within
// an octave are the ones client_golang and Prometheus define.
const (
	nativeSchema      = 3
	nativeMaxBuckets  = 160 // as histOpts' NativeHistogramMaxBucketNumber
	nativeMinSchema   = -4
	nativeKeyOffset   = 240 // key of 1 ns is -239, of math.MaxInt64 ns 265
	nativeKeys        = 512
	maxClassicBuckets = 32
)

var nativeBounds = [8]float64{
	0.5, 0.5452538663326288, 0.5946035575013605, 0.6484197773255048,
	0.7071067811865475, 0.7711054127039704, 0.8408964152537144, 0.9170040432046711,
}

// durationVec is a histogram of durations labelled like a HistogramVec,
// fed a record's worth of values at once (its inter-token gaps, its
// events' residencies): each batch is counted into buckets on the stack,
// then added with one atomic add per bucket it touched, where a
// client_golang histogram pays a few atomic adds and a map look-up per
// value. Its exposition is a client_golang histogram's with the same
// classic buckets and, unless classic only, native buckets of factor 1.1
// (TestDurationHistMatchesClientGolang holds it to that), except that a
// negative duration counts as zero, and over 160 native buckets the
// resolution is halved in the exposition only, never by resetting.
type durationVec struct {
	desc     *prometheus.Desc
	bounds   []float64
	native   bool
	mu       sync.Mutex
	children map[string]*durationHist // by label values joined by "\xff"
}

func newDurationVec(opts prometheus.HistogramOpts, labelNames []string) *durationVec {
	if len(opts.Buckets) >= maxClassicBuckets {
		panic("exporters: too many classic buckets for a durationVec")
	}
	return &durationVec{
		desc:     prometheus.NewDesc(prometheus.BuildFQName(opts.Namespace, opts.Subsystem, opts.Name), opts.Help, labelNames, nil),
		bounds:   opts.Buckets,
		native:   opts.NativeHistogramBucketFactor > 1,
		children: map[string]*durationHist{},
	}
}

// with returns the child for the label values, the same one every time.
func (v *durationVec) with(labelValues ...string) *durationHist {
	key := strings.Join(labelValues, "\xff")
	v.mu.Lock()
	defer v.mu.Unlock()
	if h, ok := v.children[key]; ok {
		return h
	}
	h := &durationHist{
		vec:     v,
		labels:  prometheus.MakeLabelPairs(v.desc, labelValues),
		created: time.Now(),
		buckets: make([]atomic.Uint64, len(v.bounds)),
	}
	if v.native {
		h.keys = new([nativeKeys]atomic.Uint64)
	}
	v.children[key] = h
	return h
}

func (v *durationVec) Describe(ch chan<- *prometheus.Desc) { ch <- v.desc }

func (v *durationVec) Collect(ch chan<- prometheus.Metric) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, h := range v.children {
		ch <- h
	}
}

// durationHist is one child of a durationVec.
type durationHist struct {
	vec     *durationVec
	labels  []*dto.LabelPair
	created time.Time
	// mu is held shared by each batch's adds and exclusively by Write, so
	// a scrape sees whole batches: count, sum and buckets agree.
	mu      sync.RWMutex
	count   atomic.Uint64
	sumBits atomic.Uint64
	buckets []atomic.Uint64            // per classic bound, not cumulative
	zero    atomic.Uint64              // native zero bucket: durations of 0
	keys    *[nativeKeys]atomic.Uint64 // native buckets by key + nativeKeyOffset; nil if classic only
}

// observeAll observes each of ds.
func (h *durationHist) observeAll(ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	var (
		classic      [maxClassicBuckets]uint32
		native       [nativeKeys]uint32
		lo, hi, zero = nativeKeys, -1, uint64(0)
		sum          time.Duration
	)
	bounds := h.vec.bounds
	for _, d := range ds {
		d = max(d, 0)
		sum += d
		v := d.Seconds()
		i := 0
		for i < len(bounds) && v > bounds[i] {
			i++
		}
		classic[i]++
		if h.keys == nil {
			continue
		}
		if d == 0 {
			zero++
			continue
		}
		frac, exp := math.Frexp(v)
		k := sort.SearchFloat64s(nativeBounds[:], frac) + (exp-1)*len(nativeBounds) + nativeKeyOffset
		native[k]++
		lo, hi = min(lo, k), max(hi, k)
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	for i := range bounds {
		if classic[i] != 0 {
			h.buckets[i].Add(uint64(classic[i]))
		}
	}
	if h.keys != nil {
		for k := lo; k <= hi; k++ {
			if native[k] != 0 {
				h.keys[k].Add(uint64(native[k]))
			}
		}
		if zero != 0 {
			h.zero.Add(zero)
		}
	}
	for {
		old := h.sumBits.Load()
		if h.sumBits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+sum.Seconds())) {
			break
		}
	}
	h.count.Add(uint64(len(ds)))
}

func (h *durationHist) Desc() *prometheus.Desc { return h.vec.desc }

// Write writes what a client_golang histogram would (classic buckets
// cumulative, native buckets as spans and deltas).
func (h *durationHist) Write(out *dto.Metric) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	count := h.count.Load()
	his := &dto.Histogram{
		SampleCount:      new(count),
		SampleSum:        new(math.Float64frombits(h.sumBits.Load())),
		Bucket:           make([]*dto.Bucket, len(h.vec.bounds)),
		CreatedTimestamp: timestamppb.New(h.created),
	}
	var cum uint64
	for i, b := range h.vec.bounds {
		cum += h.buckets[i].Load()
		his.Bucket[i] = &dto.Bucket{CumulativeCount: new(cum), UpperBound: new(b)}
	}
	if h.keys != nil {
		his.Schema = new(int32(nativeSchema))
		his.ZeroThreshold = new(prometheus.DefNativeHistogramZeroThreshold)
		his.ZeroCount = new(h.zero.Load())
		keys := map[int]uint64{}
		for i := range h.keys {
			if n := h.keys[i].Load(); n != 0 {
				keys[i-nativeKeyOffset] = n
			}
		}
		for len(keys) > nativeMaxBuckets && *his.Schema > nativeMinSchema {
			keys = halveResolution(keys)
			*his.Schema--
		}
		his.PositiveSpan, his.PositiveDelta = nativeSpans(keys)
	}
	out.Label = h.labels
	out.Histogram = his
	return nil
}

// halveResolution merges native buckets pairwise into the buckets of the
// schema one lower: bucket k's upper bound 2^(k/2^s) is bucket
// ceil(k/2)'s at schema s-1.
func halveResolution(keys map[int]uint64) map[int]uint64 {
	merged := make(map[int]uint64, len(keys)/2+1)
	for k, n := range keys {
		if k > 0 {
			k++
		}
		merged[k/2] += n
	}
	return merged
}

// nativeSpans encodes native buckets as client_golang does: spans of
// consecutive keys, a gap of one or two empty buckets kept inside a span,
// and counts as deltas from the previous bucket's.
func nativeSpans(keys map[int]uint64) ([]*dto.BucketSpan, []int64) {
	if len(keys) == 0 {
		return nil, nil
	}
	ks := make([]int, 0, len(keys))
	for k := range keys {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	var (
		spans  []*dto.BucketSpan
		deltas []int64
		prev   int64
		next   int
	)
	add := func(n int64) {
		*spans[len(spans)-1].Length++
		deltas = append(deltas, n-prev)
		prev = n
	}
	for i, k := range ks {
		gap := int32(k - next)
		if i == 0 || gap > 2 {
			spans = append(spans, &dto.BucketSpan{Offset: new(gap), Length: new(uint32(0))})
		} else {
			for range gap {
				add(0)
			}
		}
		add(int64(keys[k]))
		next = k + 1
	}
	return spans, deltas
}
