package fanin

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
)

// connectTimeout bounds a connection to an arbiter (Envoy's; gRPC has
// its own).
const connectTimeout = 5 * time.Second

// group is the one node group: every client is sent the same resources,
// whatever node ID its bootstrap names.
const group = "lockplane"

type oneGroup struct{}

func (oneGroup) ID(*corev3.Node) string { return group }

// Server serves a Spec over ADS (the aggregated discovery service) and
// publishes a new version whenever the arbiters change. A client that
// connects gets the current version at once.
type Server struct {
	name  string
	cache cachev3.SnapshotCache
	xds   serverv3.Server

	mu       sync.Mutex
	version  int
	arbiters []string
}

// New makes a server publishing spec.
func New(ctx context.Context, spec Spec, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{name: spec.Name, cache: cachev3.NewSnapshotCache(true, oneGroup{}, logger{log})}
	if err := s.SetArbiters(ctx, spec.Arbiters); err != nil {
		return nil, err
	}
	s.xds = serverv3.NewServer(ctx, s.cache, nil)
	return s, nil
}

// Register adds the aggregated discovery service to g.
func (s *Server) Register(g *grpc.Server) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, s.xds)
}

// SetArbiters publishes a new arbiter set. An invalid set is refused and
// the current one kept.
func (s *Server) SetArbiters(ctx context.Context, arbiters []string) error {
	spec := Spec{Name: s.name, Arbiters: arbiters}
	res, err := spec.Resources()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap, err := cachev3.NewSnapshot(strconv.Itoa(s.version+1), res)
	if err != nil {
		return err
	}
	if err := snap.Consistent(); err != nil {
		return fmt.Errorf("fanin: inconsistent resources: %w", err)
	}
	if err := s.cache.SetSnapshot(ctx, group, snap); err != nil {
		return err
	}
	s.version++
	s.arbiters = append([]string(nil), arbiters...)
	return nil
}

// Arbiters are the published arbiters and their version.
func (s *Server) Arbiters() ([]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.arbiters...), s.version
}

// logger is go-control-plane's logger on slog; its debug lines are
// per-request chatter and dropped.
type logger struct{ l *slog.Logger }

func (logger) Debugf(string, ...any)          {}
func (g logger) Infof(f string, args ...any)  { g.l.Info(fmt.Sprintf(f, args...), "component", "xds") }
func (g logger) Warnf(f string, args ...any)  { g.l.Warn(fmt.Sprintf(f, args...), "component", "xds") }
func (g logger) Errorf(f string, args ...any) { g.l.Error(fmt.Sprintf(f, args...), "component", "xds") }
