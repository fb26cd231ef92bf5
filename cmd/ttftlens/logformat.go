package main

import (
	"log/slog"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// Every JSON line the binary writes has the request records' shape: "time"
// (RFC 3339, nanoseconds), a lowercase "level" and "msg". Operational logs
// (zerolog) and the standalone engine's request log (slog) follow it.
func init() {
	zerolog.MessageFieldName = "msg"
	zerolog.TimeFieldFormat = time.RFC3339Nano
}

// lowerLevel is a slog ReplaceAttr that writes the level in lowercase.
func lowerLevel(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.LevelKey {
		a.Value = slog.StringValue(strings.ToLower(a.Value.String()))
	}
	return a
}
