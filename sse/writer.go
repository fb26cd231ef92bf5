package sse

import "bytes"

// AppendEvent appends one event to dst and returns the extended slice: an
// "event: typ" line when typ is not empty, one "data: " line per line of data, and
// the blank line that dispatches it. Line ends are LF.
//
// data is split at LF, CR and CRLF, so any data (model text included) yields a
// well-formed event; a reader gets data back with each of those line ends turned
// into LF. typ must not contain CR or LF: anything from the first one on is dropped
// rather than written as a line of its own.
func AppendEvent(dst []byte, typ, data []byte) []byte {
	if len(typ) > 0 {
		if i := bytes.IndexAny(typ, "\r\n"); i >= 0 {
			typ = typ[:i]
		}
		dst = append(dst, "event: "...)
		dst = append(dst, typ...)
		dst = append(dst, '\n')
	}
	dst = appendLines(dst, "data: ", data)
	return append(dst, '\n')
}

// AppendComment appends a comment block ": text\n\n" to dst and returns the
// extended slice. text is split at LF, CR and CRLF into one comment line per line.
func AppendComment(dst []byte, text []byte) []byte {
	dst = appendLines(dst, ": ", text)
	return append(dst, '\n')
}

// appendLines appends prefix+line+"\n" for each line of text (at least one).
func appendLines(dst []byte, prefix string, text []byte) []byte {
	for {
		i := bytes.IndexAny(text, "\r\n")
		if i < 0 {
			dst = append(dst, prefix...)
			dst = append(dst, text...)
			return append(dst, '\n')
		}
		dst = append(dst, prefix...)
		dst = append(dst, text[:i]...)
		dst = append(dst, '\n')
		if text[i] == '\r' && i+1 < len(text) && text[i+1] == '\n' {
			i++
		}
		text = text[i+1:]
	}
}
