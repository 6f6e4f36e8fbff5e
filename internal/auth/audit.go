package auth

import (
	"context"
	"log/slog"
)

// LogWrite records a write for the audit trail: which key (by ID, never
// the token) wrote what, over which transport, and how it ended. err nil
// means the write was committed.
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
		slog.String("namespace", namespace),
		slog.String("key", key),
		slog.String("result", result),
	}
	if err != nil {
		attrs = append(attrs, slog.Any("err", err))
	}
	log.LogAttrs(ctx, level, "write", attrs...)
}
