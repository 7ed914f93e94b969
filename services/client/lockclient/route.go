package lockclient

import (
	"context"

	"google.golang.org/grpc/metadata"
)

// KeyHeader is the request header that carries the lock key of an
// Acquire, Release or Inspect. The fan-in tier (an Envoy route, or gRPC's
// own xDS client) hashes it onto a ring of arbiters, so every waiter for
// a key reaches the same arbiter and queues there in arrival order
// (ADR-14). Without a fan-in tier it is ignored.
const KeyHeader = "x-lock-key"

// routedBy adds key as KeyHeader to ctx's outgoing metadata. A key that
// is not printable ASCII is left out: the service refuses it by name,
// which a header gRPC cannot send would hide.
func routedBy(ctx context.Context, key string) context.Context {
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return ctx
		}
	}
	return metadata.AppendToOutgoingContext(ctx, KeyHeader, key)
}
