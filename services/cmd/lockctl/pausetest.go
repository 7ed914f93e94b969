package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"github.com/lockplane/lockplane/services/client/profile"
	"github.com/lockplane/lockplane/services/pausetest"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

const exitPauseTestFailed = 5

func pausetestCmd(g *globals) *cobra.Command {
	var cfg pausetest.Config
	var out string
	c := &cobra.Command{
		Use:   "pausetest --kind postgres|s3 --target URL --class CLASS",
		Short: "Prove the resource's fence refuses a holder paused past its lease (ADR-17)",
		Long: `pausetest runs the pause test kit against a real resource: holder A (a
separate lockctl process) is granted a key, stopped before each message of
its write and frozen with SIGSTOP past its TTL; holder B is granted and
writes; A resumes. B's write must survive and A's must be refused. It also
checks that an equal token is refused and that marks are per record.

Targets: postgres://USER:PASS@HOST:PORT/DB (table ` + pausetest.PGTable + ` is created),
http://ACCESS:SECRET@HOST:PORT/BUCKET for S3. The identity calling is A
(--identity); --rival is B. It writes a PauseTestResult document (--out),
valid for a year, that a class needs before it may be declared fenced.
Exit status 5 when the fence failed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.check(); err != nil {
				return err
			}
			for flag, v := range map[string]string{"--kind": cfg.Kind, "--target": cfg.Target, "--class": cfg.Class} {
				if v == "" {
					return exitErr{exitUsage, fmt.Errorf("%s: required", flag)}
				}
			}
			path := g.profilePath
			if path == "" {
				var err error
				if path, err = profile.Find(); err != nil {
					return fmt.Errorf("pausetest needs a profile (its holder processes use it): %w", err)
				}
			}
			p, err := profile.Load(path)
			if err != nil {
				return err
			}
			cfg.Profile, cfg.Holder = path, g.identity
			if cfg.Holder == "" {
				cfg.Holder = p.DefaultIdentity
			}
			cfg.Progress = func(c, step string) {
				if !g.json() {
					fmt.Printf("[%s] %s\n", c, step)
				} else {
					fmt.Fprintf(os.Stderr, "[%s] %s\n", c, step)
				}
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, err := pausetest.Run(ctx, cfg)
			if err != nil {
				return err
			}
			if out != "" {
				y, err := yaml.Marshal(res)
				if err != nil {
					return err
				}
				if err := os.WriteFile(out, y, 0o644); err != nil {
					return err
				}
			}
			if g.json() {
				printJSON(res)
			} else {
				fmt.Printf("\n%s against %s (%s), class %s: %s\n", cfg.Kind, res.Spec.Resource.Identity, cfg.SchemaVersion, cfg.Class, res.Status.Outcome)
				tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
				for _, c := range res.Status.Cases {
					fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Name, c.Outcome, c.Detail)
				}
				tw.Flush()
				if out != "" {
					fmt.Printf("result written to %s (valid until %s)\n", out, res.Status.Expires.Format("2006-01-02"))
				}
			}
			if !res.Passed() {
				return exitErr{exitPauseTestFailed, errSilent}
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&cfg.Kind, "kind", "", "resource kind: postgres or s3")
	f.StringVar(&cfg.Target, "target", "", "the resource's URL, credentials included (never printed)")
	f.StringVar(&cfg.Class, "class", "", "the lock class being declared fenced")
	f.StringVar(&cfg.SchemaVersion, "schema-version", "", "the resource's schema version label; a change invalidates the result")
	f.StringVar(&cfg.Rival, "rival", "other", "identity in the profile of holder B (must differ from A's)")
	f.StringVar(&out, "out", "", "write the PauseTestResult document (YAML) here")
	return c
}
