// Command lockplane-fanin is the fan-in tier's xDS control plane: it
// publishes a region's arbiters to gRPC clients (proxyless, xds:///NAME)
// and to Envoy, with ring-hash routing on the lock key (services/fanin,
// docs/fan-in.md). It serves ADS over mTLS to any workload of the trust
// domain.
//
// The arbiters come from --arbiters, or from --arbiters-file (one
// host:port a line, # comments), read again on SIGHUP: an invalid list is
// logged and the published one kept.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lockplane/lockplane/services/client/identity"
	"github.com/lockplane/lockplane/services/fanin"
	"github.com/lockplane/lockplane/services/internal/svidflags"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/encoding/protojson"
)

type flags struct {
	listen, name, arbiters, arbitersFile string
	svid                                 svidflags.Flags
	envoyOut                             string
	envoy                                fanin.EnvoyConfig
}

func main() {
	var f flags
	flag.StringVar(&f.listen, "listen", "0.0.0.0:7444", "ADS gRPC address (mTLS)")
	flag.StringVar(&f.name, "name", fanin.DefaultName, "the service's xDS name: clients dial xds:///NAME")
	flag.StringVar(&f.arbiters, "arbiters", "", "comma-separated arbiter addresses, host:port (this or --arbiters-file)")
	flag.StringVar(&f.arbitersFile, "arbiters-file", "", "a file of arbiter addresses, one host:port a line; read again on SIGHUP")
	f.svid.Register(flag.CommandLine)
	flag.StringVar(&f.envoyOut, "write-envoy-config", "", "write the bootstrap of an Envoy of the fan-in tier (JSON, validated) to this file and exit, instead of serving; - for stdout")
	flag.StringVar(&f.envoy.Listen, "envoy-listen", "0.0.0.0:7443", "with --write-envoy-config: where Envoy listens for workloads")
	flag.StringVar(&f.envoy.ControlPlane, "envoy-control-plane", "", "with --write-envoy-config: this control plane's address as Envoy reaches it, host:port")
	flag.StringVar(&f.envoy.ControlPlaneID, "envoy-control-plane-id", "", "with --write-envoy-config: this control plane's SPIFFE ID")
	flag.StringVar(&f.envoy.ArbiterID, "envoy-arbiter-id", "", "with --write-envoy-config: the arbiters' SPIFFE ID")
	flag.StringVar(&f.envoy.SPIRESocket, "envoy-spire-socket", "/run/spire/agent.sock", "with --write-envoy-config: the SPIRE agent's socket path on Envoy's host (its SDS)")
	var rate, burst uint
	flag.UintVar(&rate, "envoy-call-rate", 0, "with --write-envoy-config: calls a second each client certificate may make through one Envoy (0: no limit)")
	flag.UintVar(&burst, "envoy-call-burst", 0, "with --write-envoy-config: bursts of --envoy-call-rate (0: the rate)")
	flag.Parse()
	f.envoy.CallRate, f.envoy.CallBurst = uint32(min(rate, 1<<31)), uint32(min(burst, 1<<31))
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, f, log); err != nil {
		log.Error("lockplane-fanin stopped", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, f flags, log *slog.Logger) error {
	if (f.arbiters == "") == (f.arbitersFile == "") {
		return errors.New("--arbiters or --arbiters-file: exactly one is required")
	}
	arbiters, err := f.readArbiters()
	if err != nil {
		return err
	}
	spec := fanin.Spec{Name: f.name, Arbiters: arbiters}
	if err := spec.Validate(); err != nil {
		return asFlags(err)
	}
	if f.envoyOut != "" {
		return writeEnvoy(spec, f.envoy, f.envoyOut)
	}
	src, err := f.svid.Open(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	creds, err := identity.ServerCredentials(src)
	if err != nil {
		return err
	}
	xds, err := fanin.New(ctx, spec, log)
	if err != nil {
		return asFlags(err)
	}
	// ADS streams live as long as their clients: keepalives find the
	// dead ones.
	srv := grpc.NewServer(grpc.Creds(creds),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}))
	xds.Register(srv)
	lis, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	log.Info("lockplane-fanin serving", "listen", lis.Addr().String(), "name", f.name, "arbiters", arbiters)
	if f.arbitersFile != "" {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		go func() {
			for range hup {
				list, err := f.readArbiters()
				if err == nil {
					err = xds.SetArbiters(ctx, list)
				}
				if err != nil {
					log.Error("arbiters not changed", "file", f.arbitersFile, "err", err)
					continue
				}
				_, version := xds.Arbiters()
				log.Info("arbiters published", "arbiters", list, "version", version)
			}
		}()
	}
	go func() {
		<-ctx.Done()
		srv.Stop()
	}()
	return srv.Serve(lis)
}

// asFlags names a Spec's or an EnvoyConfig's field in err as this
// command's flag.
func asFlags(err error) error {
	msg := err.Error()
	for field, flag := range map[string]string{"name": "--name", "arbiters": "--arbiters", "listen": "--envoy-listen",
		"control_plane": "--envoy-control-plane", "control_plane_id": "--envoy-control-plane-id", "arbiter_id": "--envoy-arbiter-id",
		"spire_socket": "--envoy-spire-socket", "call_burst": "--envoy-call-burst"} {
		if rest, ok := strings.CutPrefix(msg, field); ok && (strings.HasPrefix(rest, ":") || strings.HasPrefix(rest, "[")) {
			return errors.New(flag + rest)
		}
	}
	return err
}

// readArbiters reads --arbiters or --arbiters-file.
func (f flags) readArbiters() ([]string, error) {
	if f.arbiters != "" {
		list := strings.Split(f.arbiters, ",")
		for i := range list {
			list[i] = strings.TrimSpace(list[i])
		}
		return list, nil
	}
	file, err := os.Open(f.arbitersFile)
	if err != nil {
		return nil, fmt.Errorf("--arbiters-file: %w", err)
	}
	defer file.Close()
	var out []string
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--arbiters-file: %w", err)
	}
	return out, nil
}

// writeEnvoy writes the Envoy bootstrap of spec and c to path.
func writeEnvoy(spec fanin.Spec, c fanin.EnvoyConfig, path string) error {
	b, err := spec.Envoy(c)
	if err != nil {
		return fmt.Errorf("--write-envoy-config: %w", asFlags(err))
	}
	js, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(b)
	if err != nil {
		return err
	}
	js = append(js, '\n')
	if path == "-" {
		_, err = os.Stdout.Write(js)
		return err
	}
	return os.WriteFile(path, js, 0o644)
}
