// Package stateapi serves Dapr's state management API, v1.0, over the core:
// the HTTP routes under /v1.0/state/{storename} and the state RPCs of the
// gRPC service dapr.proto.runtime.v1.Dapr, so that an unmodified Dapr
// application (any Dapr SDK pointed at warmcache's address) reads and
// writes warmcache's namespaces.
//
// ETags, concurrency, consistency, metadata and the errors' answers are
// internal/dapr's mapping, which the pluggable component shares. Here:
//   - a Dapr state store name is a warmcache namespace name;
//   - a Dapr key is a warmcache key, without Dapr's "appid||" prefix;
//   - several items of one save, one bulk delete, and every transaction
//     commit in one SQL transaction;
//   - on a JSON namespace contentType application/json (or a +json type)
//     is accepted and any other is refused;
//   - the answers to errors are daprd's: its errorCode and message words
//     of the failed operation, over HTTP and gRPC;
//   - a namespace of opaque bytes (value layout bytes) takes any value
//     under any contentType, and reads answer its bytes as stored with the
//     namespace's content type (contentType in the response metadata, the
//     Content-Type of an HTTP read). Over HTTP a save's value is JSON, so it
//     stores the value's JSON text, as daprd hands a store; and an HTTP bulk
//     read, whose data is JSON, carries each value as a base64 string.
//
// The protocol types come from Dapr's own Go packages
// (github.com/dapr/dapr/pkg/proto/runtime/v1 and common/v1).
package stateapi

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/dapr"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// state is what both transports share: the Dapr state operations over the
// core, with Dapr's semantics, and access control.
type state struct {
	svc  *warmcache.Service
	keys *auth.Keyring
	log  *slog.Logger
}

// txOp is one operation of a transaction: exactly one of set and del.
type txOp struct {
	set *dapr.Save
	del *dapr.Delete
}

// authorize authenticates token (the dapr-api-token header) and checks its
// scope on the store.
func (s *state) authorize(ctx context.Context, token, store string, scope auth.Scope) (auth.Principal, error) {
	p := auth.Principal{KeyID: auth.Anonymous}
	if s.keys != nil {
		var err error
		if p, err = s.keys.Authenticate(token); err != nil {
			return auth.Principal{}, err
		}
	}
	if err := p.Authorize(store, scope); err != nil {
		return auth.Principal{}, err
	}
	return p, nil
}

// apply commits ops in one transaction.
func (s *state) apply(ctx context.Context, p auth.Principal, transport, op, store string, ops []txOp, txMeta map[string]string) error {
	if err := dapr.CheckMetadata(s.metadataOf(store, txMeta)); err != nil {
		return err
	}
	wops := make([]warmcache.Op, len(ops))
	for i, o := range ops {
		var err error
		if o.set != nil {
			it := *o.set
			it.Metadata = s.metadataOf(store, it.Metadata)
			wops[i], err = dapr.SaveOp(it)
		} else {
			it := *o.del
			it.Metadata = s.metadataOf(store, it.Metadata)
			wops[i], err = dapr.DeleteOp(it)
		}
		if err != nil {
			return err
		}
	}
	_, err := s.svc.Transact(ctx, store, wops)
	p.LogWrite(ctx, s.log, transport, op, store, fmt.Sprintf("(%d keys)", len(ops)), err)
	return err
}

// opaque returns the namespace of store when it stores opaque bytes
// (warmcache.LayoutBytes), or nil.
func (s *state) opaque(store string) *warmcache.Namespace {
	ns, err := s.svc.Namespace(store)
	if err != nil || !ns.Opaque() {
		return nil
	}
	return ns
}

// metadataOf returns the metadata of a request to store as
// dapr.CheckMetadata is to judge it: for a namespace of opaque bytes, which
// takes any content type, without contentType; otherwise meta itself.
func (s *state) metadataOf(store string, meta map[string]string) map[string]string {
	if _, ok := meta[dapr.MetaContentType]; !ok || s.opaque(store) == nil {
		return meta
	}
	return dapr.WithoutContentType(meta)
}

// contentType returns the media type of a read's answer: the namespace's
// own for opaque bytes (the item carries it), application/json otherwise.
func contentType(it warmcache.Item) string {
	if it.Opaque {
		return it.MediaType
	}
	return warmcache.ContentTypeJSON
}
