package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"time"

	"github.com/spf13/cobra"
)

// probeCommand is `lockplane-node probe`: the readiness checks a Service
// runs on its host after it starts (nodes/provider ready.go). Each prints
// the address that answered and exits 0, or exits 1 saying why not.
func probeCommand() *cobra.Command {
	var timeout time.Duration
	probe := &cobra.Command{Use: "probe", Short: "Check that a service on this host answers"}
	probe.PersistentFlags().DurationVar(&timeout, "timeout", 5*time.Second, "bound on the whole check")

	var ca, cert, key string
	var want int
	httpCmd := &cobra.Command{
		Use:   "http URL",
		Short: "GET URL and require a status (MinIO /minio/health/live, ClickHouse /ping, etcd /health)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			addr, err := probeHTTP(ctx, args[0], ca, cert, key, want)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), addr)
			return nil
		},
	}
	httpCmd.Flags().StringVar(&ca, "ca", "", "CA bundle that signed the server's certificate (PEM); default: the system's")
	httpCmd.Flags().StringVar(&cert, "cert", "", "client certificate (PEM), for a server that requires one")
	httpCmd.Flags().StringVar(&key, "key", "", "client key (PEM), with --cert")
	httpCmd.Flags().IntVar(&want, "want", http.StatusOK, "the status the service answers when it serves")

	tcpCmd := &cobra.Command{
		Use:   "tcp ADDR",
		Short: "Connect to ADDR (host:port): the service accepts connections",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			addr, err := probeTCP(ctx, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), addr)
			return nil
		},
	}
	probe.AddCommand(httpCmd, tcpCmd)
	return probe
}

// probeHTTP GETs url and returns the address that answered with status
// want.
func probeHTTP(ctx context.Context, url, ca, cert, key string, want int) (string, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return "", fmt.Errorf("--ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return "", fmt.Errorf("--ca %s: no PEM certificate in it", ca)
		}
	}
	if (cert == "") != (key == "") {
		return "", errors.New("--cert and --key: give both or neither")
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return "", fmt.Errorf("--cert, --key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	var answered string
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		answered = i.Conn.RemoteAddr().String()
	}})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != want {
		return "", fmt.Errorf("GET %s: %s from %s, want %d: %q", url, resp.Status, answered, want, body)
	}
	return answered, nil
}

// probeTCP connects to addr and returns the address that accepted.
func probeTCP(ctx context.Context, addr string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.RemoteAddr().String(), nil
}
