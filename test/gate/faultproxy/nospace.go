package faultproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// NoSpace is a gRPC proxy in front of one etcd member's client port that
// can answer an applied write with etcd's NOSPACE error: it forwards a
// KV Txn that puts a key under a prefix (a grant), and when armed replaces
// the member's successful answer with "etcdserver: mvcc: database space
// exceeded", as etcd's quota applier does when the backend passed its
// quota during that very apply. The write is in etcd; the caller is told
// it is not. Everything else passes through unchanged, streams included.
type NoSpace struct {
	ln     net.Listener
	srv    *grpc.Server
	conn   *grpc.ClientConn
	prefix string

	// every: when > 0, one applied grant Txn in every is answered NOSPACE.
	every    atomic.Int64
	seen     atomic.Int64
	injected atomic.Int64
}

// NewNoSpace listens on listen ("127.0.0.1:0") and forwards to the etcd
// member at target (host:port, plaintext). Txns putting a key below prefix
// are the ones Arm affects.
func NewNoSpace(listen, target, prefix string) (*NoSpace, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(frameCodec{})))
	if err != nil {
		ln.Close()
		return nil, err
	}
	p := &NoSpace{ln: ln, conn: conn, prefix: prefix}
	p.srv = grpc.NewServer(grpc.ForceServerCodec(frameCodec{}), grpc.UnknownServiceHandler(p.forward))
	go p.srv.Serve(ln)
	return p, nil
}

// Addr is the proxy's address.
func (p *NoSpace) Addr() string { return p.ln.Addr().String() }

// Arm answers one applied grant Txn in every with NOSPACE; 0 disarms.
func (p *NoSpace) Arm(every int) { p.every.Store(int64(every)) }

// Injected counts the applied grants answered NOSPACE.
func (p *NoSpace) Injected() int { return int(p.injected.Load()) }

// Close stops the proxy.
func (p *NoSpace) Close() {
	p.srv.Stop()
	p.conn.Close()
}

const txnMethod = "/etcdserverpb.KV/Txn"

// forward relays one call, any method, both directions.
func (p *NoSpace) forward(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = metadata.NewOutgoingContext(ctx, md.Copy())
	}
	cs, err := p.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var lastReq []byte
	go func() {
		for {
			var f frame
			if err := ss.RecvMsg(&f); err != nil {
				cs.CloseSend()
				return
			}
			mu.Lock()
			lastReq = f
			mu.Unlock()
			if err := cs.SendMsg(&f); err != nil {
				return
			}
		}
	}()
	first := true
	for {
		var f frame
		if err := cs.RecvMsg(&f); err != nil {
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if first {
			if h, err := cs.Header(); err == nil {
				ss.SendHeader(h)
			}
			first = false
		}
		if method == txnMethod {
			mu.Lock()
			req := lastReq
			mu.Unlock()
			if p.inject(req, f) {
				return rpctypes.ErrGRPCNoSpace
			}
		}
		if err := ss.SendMsg(&f); err != nil {
			return err
		}
	}
}

// inject decides whether this Txn's answer becomes NOSPACE: armed, a
// Txn that put a key below the prefix, applied (it succeeded), and its
// turn.
func (p *NoSpace) inject(req, resp []byte) bool {
	every := p.every.Load()
	if every <= 0 {
		return false
	}
	var rq pb.TxnRequest
	var rs pb.TxnResponse
	if rq.Unmarshal(req) != nil || rs.Unmarshal(resp) != nil {
		return false
	}
	ops := rq.Failure
	if rs.Succeeded {
		ops = rq.Success
	}
	if !p.puts(ops) {
		return false
	}
	if p.seen.Add(1)%every != 0 {
		return false
	}
	p.injected.Add(1)
	return true
}

// puts reports whether ops put a key below the prefix, nested Txns too.
func (p *NoSpace) puts(ops []*pb.RequestOp) bool {
	for _, op := range ops {
		switch r := op.Request.(type) {
		case *pb.RequestOp_RequestPut:
			if strings.HasPrefix(string(r.RequestPut.Key), p.prefix) {
				return true
			}
		case *pb.RequestOp_RequestTxn:
			if p.puts(r.RequestTxn.Success) || p.puts(r.RequestTxn.Failure) {
				return true
			}
		}
	}
	return false
}

// frame is one gRPC message, its bytes as they came.
type frame []byte

// frameCodec passes frames through without decoding them.
type frameCodec struct{}

func (frameCodec) Marshal(v any) ([]byte, error) { return *(v.(*frame)), nil }
func (frameCodec) Unmarshal(data []byte, v any) error {
	*(v.(*frame)) = append([]byte(nil), data...)
	return nil
}
func (frameCodec) Name() string { return "proto" }
