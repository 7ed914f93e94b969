package main

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lockplane/lockplane/services/class"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/policy"
	"github.com/spf13/cobra"
)

func policyCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "policy", Short: "Check lock classes and grants, price them, and list the advisory register"}
	c.AddCommand(policyCheckCmd(g), policyCostCmd(g), policyRegisterCmd(g))
	return c
}

// loadPolicy loads a set, reporting every problem as a person or as JSON.
func loadPolicy(g *globals, dir string) (*policy.Set, error) {
	if err := g.check(); err != nil {
		return nil, exitErr{exitUsage, err}
	}
	set, err := policy.Load(dir, time.Now())
	var inv *policy.Invalid
	if errors.As(err, &inv) {
		if g.json() {
			printJSON(map[string]any{"valid": false, "problems": inv.Problems})
		} else {
			for _, p := range inv.Problems {
				fmt.Fprintln(os.Stderr, p)
			}
			fmt.Fprintf(os.Stderr, "%d problem(s): the set is refused whole\n", len(inv.Problems))
		}
		return nil, exitErr{exitError, errSilent}
	}
	return set, err
}

func policyCheckCmd(g *globals) *cobra.Command {
	var previous string
	c := &cobra.Command{
		Use:   "check DIR",
		Short: "Validate every LockClass and LockGrant under DIR (what a class repository's CI runs)",
		Long: `check validates every document under DIR and the set as a whole. With
--previous, the set being replaced (the serving branch's checkout), it
also refuses a change that moves keys to another tier: held keys would
end up on two clusters while arbiters run both sets. A rehome is not an
edit; drain the keys first.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			set, err := loadPolicy(g, args[0])
			if err != nil {
				return err
			}
			var moved []string
			if previous != "" {
				prev, err := loadPolicy(g, previous)
				if err != nil {
					return err
				}
				moved = class.Rehomed(prev.Registry(), set.Registry())
			}
			if len(moved) > 0 {
				if g.json() {
					printJSON(map[string]any{"valid": false, "rehomed": moved})
				} else {
					fmt.Fprintf(os.Stderr, "keys under %s would move to another tier than --previous %s serves them on: a rehome, not an edit; drain those keys first\n", strings.Join(moved, ", "), previous)
				}
				return exitErr{exitError, errSilent}
			}
			unowned := set.Unowned()
			if g.json() {
				printJSON(map[string]any{"valid": true, "files": set.Files, "classes": len(set.Classes), "grants": len(set.Grants), "namespaces_homed": len(set.Regions),
					"namespaces_owned": len(set.Owners), "unowned": nonNil(unowned)})
				return nil
			}
			fmt.Printf("%s: %d files, %d classes, %d grants, %d namespaces homed to a region, %d with an owner: valid\n", args[0], set.Files, len(set.Classes), len(set.Grants), len(set.Regions), len(set.Owners))
			if len(unowned) > 0 {
				fmt.Fprintf(os.Stderr, "warning: no LockNamespace names an owner for %s: their holders' alerts go to the platform's receiver (spec.owner, docs/observability.md)\n", strings.Join(unowned, ", "))
			}
			return nil
		},
	}
	c.Flags().StringVar(&previous, "previous", "", "the policy set DIR replaces: refuse a change that moves keys to another tier")
	return c
}

// classCost is a class's renewal load and liveness (ADR-11).
type classCost struct {
	Class         string  `json:"class"`
	Namespace     string  `json:"namespace"`
	Enforcement   string  `json:"enforcement"`
	Tier          string  `json:"tier"`
	Fairness      string  `json:"fairness"`
	TTL           string  `json:"ttl"`
	Sessions      int     `json:"sessions"`
	KeepalivesSec float64 `json:"keepalives_per_second"`
	// LivenessBound is how long a crashed holder can block its keys: its
	// lease runs a full TTL from its last keepalive.
	LivenessBound string `json:"liveness_bound"`
	// WritesPerWaiter is the consensus writes a waiter costs.
	WritesPerWaiter int `json:"consensus_writes_per_waiter"`
}

func policyCostCmd(g *globals) *cobra.Command {
	var sessions int
	c := &cobra.Command{
		Use:   "cost DIR",
		Short: "Print each class's keepalive load for N sessions and its liveness bound",
		Long: `cost prints, per class, what its TTL costs: keepalives per second for
--sessions sessions (a session renews every TTL/3), the liveness bound (a
crashed holder blocks its keys for up to one TTL after its last
keepalive), and the consensus writes each waiter costs (durable fairness
writes and deletes a waiter key: two). An entity-tier session's keepalive
also renews its lease on each entity shard it holds on.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if sessions < 1 {
				return exitErr{exitUsage, fmt.Errorf("--sessions: %d must be at least 1", sessions)}
			}
			set, err := loadPolicy(g, args[0])
			if err != nil {
				return err
			}
			var rows []classCost
			for _, c := range sortedClasses(set) {
				w := 0
				if c.Spec.Fairness == policy.FairnessDurable {
					w = 2
				}
				rows = append(rows, classCost{Class: c.Name, Namespace: c.Spec.Namespace, Enforcement: c.Spec.Enforcement, Tier: c.Spec.Tier, Fairness: c.Spec.Fairness,
					TTL: c.TTL.String(), Sessions: sessions, KeepalivesSec: float64(sessions) / (c.TTL.Seconds() / lockclient.RenewalsPerTTL),
					LivenessBound: c.TTL.String(), WritesPerWaiter: w})
			}
			if g.json() {
				printJSON(rows)
				return nil
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CLASS\tNAMESPACE\tENFORCEMENT\tTIER\tTTL\tKEEPALIVES/S\tLIVENESS BOUND\tFAIRNESS\tWRITES/WAITER")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t%d\n", r.Class, r.Namespace, r.Enforcement, r.Tier, r.TTL, r.KeepalivesSec, r.LivenessBound, r.Fairness, r.WritesPerWaiter)
			}
			tw.Flush()
			fmt.Printf("(for %d sessions per class)\n", sessions)
			return nil
		},
	}
	c.Flags().IntVar(&sessions, "sessions", 1000, "sessions per class to price")
	return c
}

// registerEntry is one advisory correctness class (ADR-01).
type registerEntry struct {
	Class         string `json:"class"`
	Namespace     string `json:"namespace"`
	RiskOwner     string `json:"risk_owner"`
	WaiverExpires string `json:"waiver_expires"`
	Expired       bool   `json:"expired"`
}

func policyRegisterCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "register DIR",
		Short: "List the advisory register: correctness classes without a fence, their risk owners and waivers",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			set, err := loadPolicy(g, args[0])
			if err != nil {
				return err
			}
			var rows []registerEntry
			for _, c := range sortedClasses(set) {
				if c.Spec.Purpose != policy.PurposeCorrectness || c.Spec.Enforcement != policy.EnforcementAdvisor {
					continue
				}
				rows = append(rows, registerEntry{Class: c.Name, Namespace: c.Spec.Namespace, RiskOwner: c.Spec.RiskOwner,
					WaiverExpires: c.WaiverExpires.Format("2006-01-02"), Expired: !c.WaiverExpires.After(time.Now())})
			}
			if g.json() {
				printJSON(rows)
				return nil
			}
			if len(rows) == 0 {
				fmt.Println("the advisory register is empty: every correctness class is fenced")
				return nil
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CLASS\tNAMESPACE\tRISK OWNER\tWAIVER EXPIRES\t")
			for _, r := range rows {
				flag := ""
				if r.Expired {
					flag = "EXPIRED"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Class, r.Namespace, r.RiskOwner, r.WaiverExpires, flag)
			}
			return tw.Flush()
		},
	}
}

func sortedClasses(set *policy.Set) []policy.Class {
	var out []policy.Class
	for _, c := range set.Classes {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// nonNil is s, or an empty list for JSON rather than null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
