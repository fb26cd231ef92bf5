package predict

import "time"

// Miss is how a prediction compared with what was measured.
type Miss struct {
	// Ratio is the predicted total over the measured total (1: exact;
	// above: the request came sooner than predicted); 0 when nothing was
	// measured.
	Ratio float64
	// Part is the part whose prediction was furthest from its measurement,
	// and By how far: predicted minus measured (below zero: it took longer
	// than predicted).
	Part Part
	By   time.Duration
}

// Compare compares a request's predicted parts with its measured ones
// (Observation.Parts): the prediction error the metrics and the record
// carry. A prediction from unsplit observations compared with a split
// measurement (or the reverse) differs most in Unattributed or in the
// engine's parts: the split it could not know.
func Compare(predicted, measured Parts) Miss {
	var m Miss
	if total := measured.Sum(); total > 0 {
		m.Ratio = float64(predicted.Sum()) / float64(total)
	}
	for p := range NumParts {
		if by := predicted[p] - measured[p]; abs(by) > abs(m.By) {
			m.Part, m.By = p, by
		}
	}
	return m
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
