package lockclient

import (
	"context"

	"github.com/lockplane/lockplane/services/client/protocol"

	"google.golang.org/grpc/metadata"
)

// KeyHeader is the request header that carries the lock key, which the
// fan-in tier hashes onto a ring of arbiters (protocol.KeyHeader).
const KeyHeader = protocol.KeyHeader

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
