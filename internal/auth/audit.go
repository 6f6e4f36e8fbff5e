package auth

import (
	"context"
	"log/slog"
	"strconv"
	"unicode/utf8"
)

// LogWrite records a write for the audit trail: which key (by ID, never
// the token) wrote what, over which transport, and how it ended. err nil
// means the write was committed. The namespace and the key are logged as
// at most MaxLoggedKeyBytes bytes each (cut on a character boundary, with
// the full length), so that a client cannot grow the log with long keys.
func (p Principal) LogWrite(ctx context.Context, log *slog.Logger, transport, op, namespace, key string, err error) {
	result := "ok"
	level := slog.LevelInfo
	if err != nil {
		result = "error"
		level = slog.LevelWarn
	}
	attrs := []slog.Attr{
		slog.String("audit", "write"),
		slog.String("key_id", p.KeyID),
		slog.String("transport", transport),
		slog.String("op", op),
		slog.String("namespace", clip(namespace)),
		slog.String("key", clip(key)),
		slog.String("result", result),
	}
	if err != nil {
		attrs = append(attrs, slog.Any("err", err))
	}
	log.LogAttrs(ctx, level, "write", attrs...)
}

// MaxLoggedKeyBytes bounds a key or namespace as the audit log shows it.
const MaxLoggedKeyBytes = 128

// clip shortens s to MaxLoggedKeyBytes, on a UTF-8 boundary, and says how
// long it was.
func clip(s string) string {
	if len(s) <= MaxLoggedKeyBytes {
		return s
	}
	n := MaxLoggedKeyBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "...(" + strconv.Itoa(len(s)) + " bytes)"
}
