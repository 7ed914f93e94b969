package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/lockplane/lockplane/services/operator/login"
	"github.com/spf13/cobra"
)

// issuerEnv names the OpenID provider when --issuer is not given.
const issuerEnv = "LOCKPLANE_OIDC_ISSUER"

func loginCmd(g *globals) *cobra.Command {
	var issuer, clientID, ca string
	var wait time.Duration
	c := &cobra.Command{
		Use:   "login",
		Short: "Sign an operator in at the OpenID provider and cache the ID token for force-release and epoch advance",
		Long: `login signs an operator in with the device authorization grant: it prints a URL
and a code; open the URL in any browser, sign in (password and one-time code), and
approve. The ID token is checked and cached, readable by you only, for its lifetime,
at --id-token-file, $` + idTokenEnv + `, or the user cache directory
(~/.cache/lockplane/operator-token.json). The arbiter verifies it on every
two-person call: issuer, audience, expiry, the operator role and a second factor.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if issuer == "" {
				issuer = os.Getenv(issuerEnv)
			}
			if issuer == "" {
				return fmt.Errorf("--issuer: required (or $%s): the OpenID provider's URL, e.g. https://keycloak.example/realms/lockplane", issuerEnv)
			}
			path, err := g.idTokenFile()
			if err != nil {
				return err
			}
			cfg := login.Config{Issuer: issuer, ClientID: clientID, CachePath: path, Out: cmd.ErrOrStderr()}
			if ca != "" {
				if cfg.CAPEM, err = os.ReadFile(ca); err != nil {
					return fmt.Errorf("--ca: %w", err)
				}
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			tok, err := login.Login(ctx, cfg)
			if err != nil {
				return err
			}
			if g.json() {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"issuer": tok.Issuer, "subject": tok.Subject,
					"expiry": tok.Expiry.UTC().Format(time.RFC3339), "cache": path})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "signed in as %s at %s until %s (token cached at %s)\n", tok.Subject, tok.Issuer,
				tok.Expiry.Local().Format(time.RFC3339), path)
			return nil
		},
	}
	c.Flags().StringVar(&issuer, "issuer", "", "the OpenID provider (default $"+issuerEnv+")")
	c.Flags().StringVar(&clientID, "client-id", "lockctl", "the public client with the device grant")
	c.Flags().StringVar(&ca, "ca", "", "CA bundle (PEM) for the provider's TLS; the system roots when empty")
	c.Flags().DurationVar(&wait, "wait", 10*time.Minute, "how long to wait for the approval in the browser")
	return c
}

func logoutCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "logout",
		Short: "Forget the cached operator ID token",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := g.idTokenFile()
			if err != nil {
				return err
			}
			if err := login.Logout(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "signed out (removed %s)\n", path)
			return nil
		},
	}
}
