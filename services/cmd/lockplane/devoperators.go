package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lockplane/lockplane/services/internal/arbiter/admin"
	"github.com/lockplane/lockplane/services/operator/devidp"
	"github.com/lockplane/lockplane/services/operator/oidcauth"
	"github.com/pquerna/otp/totp"
	"github.com/spf13/cobra"
)

// devOperator is one of the embedded default's operators as
// operators/users.json keeps them (0600, under --dir): what a developer
// signs in with.
type devOperator struct {
	Name       string   `json:"name"`
	Password   string   `json:"password"`
	TOTPSecret string   `json:"totp_secret"`
	Roles      []string `json:"roles,omitempty"`
}

// startOperators starts the embedded default's OpenID provider (alice and
// bob with the operator role, carol without) and writes its CA and users
// under dir. The arbiter verifies their ID tokens as a deployed one does.
func startOperators(dir string) (*devidp.Provider, admin.OperatorVerifier, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	idp, err := devidp.Start(devidp.Config{})
	if err != nil {
		return nil, nil, err
	}
	var users []devOperator
	for _, name := range []string{"alice", "bob", "carol"} {
		u, ok := idp.User(name)
		if ok {
			users = append(users, devOperator{Name: u.Name, Password: u.Password, TOTPSecret: u.TOTPSecret, Roles: u.Roles})
		}
	}
	b, _ := json.MarshalIndent(users, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "users.json"), b, 0o600); err != nil {
		idp.Close()
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), idp.CAPEM(), 0o644); err != nil {
		idp.Close()
		return nil, nil, err
	}
	return idp, admin.OIDCOperators(oidcauth.Config{Issuer: idp.Issuer(), ClientID: idp.ClientID(), Role: "lock-operator",
		RequireAMR: []string{"otp"}, CAPEM: idp.CAPEM()}), nil
}

// devOTPCmd prints an embedded-default operator's current one-time code,
// the second factor of lockctl login.
func devOTPCmd(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "otp USER",
		Short: "Print an embedded-default operator's current one-time code (alice, bob or carol), for lockctl login",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := filepath.Join(*dir, "operators", "users.json")
			b, err := os.ReadFile(path)
			if err != nil {
				return fmt.Errorf("%s: %w (is make dev running?)", path, err)
			}
			var users []devOperator
			if err := json.Unmarshal(b, &users); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			for _, u := range users {
				if u.Name == args[0] {
					code, err := totp.GenerateCode(u.TOTPSecret, time.Now())
					if err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s\n", code)
					return nil
				}
			}
			return fmt.Errorf("USER: %q is not an operator of the embedded default (alice, bob, carol)", args[0])
		},
	}
}
