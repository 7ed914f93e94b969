package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func reportCmd(g *globals) *cobra.Command {
	window := since(7 * 24 * time.Hour)
	c := &cobra.Command{
		Use:   "report register|contention|cost [--since 7d]",
		Short: "Reports from audit history: the register of classes, contention per class, cost per identity",
		Long: `report computes, from audit history in ClickHouse:
  register    every class with its enforcement (fenced or advisory), purpose,
              risk owner and waiver expiry, and the holds it began (ADR-01)
  contention  per namespace and class: grants, handoffs to waiters, waits
              (grants whose request waited, and how long: p50, p99),
              releases, expiries, and hold times (p50, p99, max)
  cost        per identity: sessions opened, holds, writes to the lock log, and
              keepalives ESTIMATED from its sessions' lifetimes in the log
              (renewed at open, then every TTL/3, as lockclient does)
Only operators may read them.`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"register", "contention", "cost"},
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(func(ctx context.Context, c *lockclient.Client) error {
				r, err := adminv1.NewAdminServiceClient(c.Conn()).Report(ctx, &adminv1.ReportRequest{
					Kind: args[0], Since: timestamppb.New(window.ago())})
				if err != nil {
					return err
				}
				if g.json() {
					printProto(r)
					return nil
				}
				printReport(args[0], r)
				return nil
			})
		},
	}
	c.Flags().Var(&window, "since", "how far back: a Go duration or whole days (7d, 1d12h)")
	return c
}

func printReport(kind string, r *adminv1.ReportResponse) {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	defer w.Flush()
	switch kind {
	case "register":
		fmt.Fprintln(w, "CLASS\tNAMESPACE\tENFORCEMENT\tPURPOSE\tRISK OWNER\tWAIVER EXPIRES\tGRANTS")
		for _, x := range r.GetRegister() {
			waiver := "-"
			if x.GetWaiverExpires() != nil {
				waiver = x.GetWaiverExpires().AsTime().Format("2006-01-02")
				if x.GetWaiverExpires().AsTime().Before(time.Now()) {
					waiver += " (EXPIRED)"
				}
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", x.GetClass(), dash(x.GetNamespace()), dash(x.GetEnforcement()),
				dash(x.GetPurpose()), dash(x.GetRiskOwner()), waiver, x.GetGrants())
		}
	case "contention":
		fmt.Fprintln(w, "NAMESPACE\tCLASS\tGRANTS\tHANDOFFS\tWAITS\tWAIT P50\tWAIT P99\tRELEASES\tEXPIRIES\tHOLD P50\tHOLD P99\tHOLD MAX")
		for _, x := range r.GetContention() {
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", x.GetNamespace(), x.GetClass(), x.GetGrants(), x.GetHandoffs(),
				x.GetWaits(), msOf(x.GetWaitP50Ms(), x.GetWaits()), msOf(x.GetWaitP99Ms(), x.GetWaits()),
				x.GetReleases(), x.GetExpiries(), msOf(x.GetHoldP50Ms(), x.GetHolds()), msOf(x.GetHoldP99Ms(), x.GetHolds()), msOf(x.GetHoldMaxMs(), x.GetHolds()))
		}
	case "cost":
		fmt.Fprintln(w, "IDENTITY\tSESSIONS\tHOLDS\tWRITES\tKEEPALIVES (ESTIMATED)")
		for _, x := range r.GetCost() {
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t~%d\n", x.GetIdentity(), x.GetSessions(), x.GetHolds(), x.GetWrites(), x.GetKeepalivesEstimated())
		}
		w.Flush()
		fmt.Println("(keepalives are estimated from session lifetimes: a renewal at open, then every TTL/3; lockplane_renewals_total counts them per cluster)")
	}
}

// msOf shows a hold or wait time, or a dash where none was counted.
func msOf(ms, holds int64) string {
	if holds == 0 {
		return "-"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}
