// Command dapr-example is a Dapr application, written only against the Dapr
// Go SDK, that keeps its state in warmcache. It finds its "sidecar" the way
// every Dapr application does, through DAPR_GRPC_ENDPOINT (or
// DAPR_GRPC_PORT), so pointing it at warmcache's Dapr gRPC listener is all
// it takes:
//
//	warmcache serve --dapr-grpc-addr 127.0.0.1:50001 ...
//	DAPR_GRPC_ENDPOINT=127.0.0.1:50001 go run ./cmd/dapr-example -store statestore
//
// It saves an order, reads it back with its ETag, updates it with
// optimistic concurrency, shows the conflict a stale ETag gets, moves stock
// between two keys in one transaction, reads them in bulk and deletes them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	dapr "github.com/dapr/go-sdk/client"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "dapr-example:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("dapr-example", flag.ContinueOnError)
	store := fs.String("store", "statestore", "the Dapr state store: a warmcache namespace with text keys")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := dapr.NewClient()
	if err != nil {
		return err
	}
	defer client.Close()

	firstWrite := dapr.WithConcurrency(dapr.StateConcurrencyFirstWrite)
	if err := client.SaveState(ctx, *store, "order-100", []byte(`{"item": "book", "qty": 1}`), nil); err != nil {
		return fmt.Errorf("save: %w", err)
	}
	order, err := client.GetState(ctx, *store, "order-100", nil)
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	fmt.Fprintf(out, "order-100 = %s (etag %s, from %s)\n", order.Value, order.Etag, order.Metadata["warmcache-source"])

	if err := client.SaveStateWithETag(ctx, *store, "order-100", []byte(`{"item": "book", "qty": 2}`), order.Etag, nil, firstWrite); err != nil {
		return fmt.Errorf("update at etag %s: %w", order.Etag, err)
	}
	err = client.SaveStateWithETag(ctx, *store, "order-100", []byte(`{"item": "book", "qty": 3}`), order.Etag, nil, firstWrite)
	if err == nil {
		return errors.New("an update at a stale etag succeeded")
	}
	fmt.Fprintf(out, "update at the stale etag %s refused: %v\n", order.Etag, err)

	ops := []*dapr.StateOperation{
		{Type: dapr.StateOperationTypeUpsert, Item: &dapr.SetStateItem{Key: "stock-book", Value: []byte(`{"left": 9}`)}},
		{Type: dapr.StateOperationTypeUpsert, Item: &dapr.SetStateItem{Key: "reserved-order-100", Value: []byte(`{"qty": 2}`)}},
	}
	if err := client.ExecuteStateTransaction(ctx, *store, nil, ops); err != nil {
		return fmt.Errorf("transaction: %w", err)
	}
	items, err := client.GetBulkState(ctx, *store, []string{"order-100", "stock-book", "reserved-order-100"}, nil, 3)
	if err != nil {
		return fmt.Errorf("bulk get: %w", err)
	}
	for _, it := range items {
		fmt.Fprintf(out, "%s = %s (etag %s)\n", it.Key, it.Value, it.Etag)
	}
	if err := client.DeleteBulkState(ctx, *store, []string{"order-100", "stock-book", "reserved-order-100"}, nil); err != nil {
		return fmt.Errorf("bulk delete: %w", err)
	}
	fmt.Fprintln(out, "deleted")
	return nil
}
