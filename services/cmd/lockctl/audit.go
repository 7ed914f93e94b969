package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func auditCmd(g *globals) *cobra.Command {
	var q struct {
		since           since
		limit           int32
		holder, ns, cls string
	}
	c := &cobra.Command{
		Use:   "audit [KEY] [--holder SPIFFE_ID | --namespace NS [--class C]] [--since 24h]",
		Short: "Show the history of a key, a holder, or a namespace: grants, handoffs, releases, closes, expiries",
		Long: `audit reads the history the audit tailer took from etcd's own revisions:
every grant, handoff, release, session close and lease expiry, with its
time, cluster, revision, holder identity and instance, session and class,
and how long a grant's request waited for the key;
and epoch advances, shard moves and gaps (revisions compacted before the
tailer read them). Name a KEY, a --holder, or a --namespace (and --class).
Only operators may read audit history. (--holder, since --identity is the
identity lockctl calls as.)`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &adminv1.AuditRequest{Identity: q.holder, Namespace: q.ns, Class: q.cls, Limit: q.limit,
				Since: timestamppb.New(q.since.ago())}
			if len(args) == 1 {
				req.Key = args[0]
			}
			return g.call(func(ctx context.Context, c *lockclient.Client) error {
				r, err := adminv1.NewAdminServiceClient(c.Conn()).Audit(ctx, req)
				if err != nil {
					return err
				}
				if g.json() {
					printProto(r)
					return nil
				}
				printAudit(r.GetEvents(), r.GetTruncated())
				return nil
			})
		},
	}
	q.since = since(24 * time.Hour)
	c.Flags().Var(&q.since, "since", "how far back: a Go duration or whole days (7d, 1d12h)")
	c.Flags().Int32Var(&q.limit, "limit", 0, "at most this many events of the key, holder or namespace (default 1000); cluster events beside them are not counted")
	c.Flags().StringVar(&q.holder, "holder", "", "the events of one identity (a SPIFFE ID)")
	c.Flags().StringVar(&q.ns, "namespace", "", "the events of one namespace")
	c.Flags().StringVar(&q.cls, "class", "", "with --namespace: of one class")
	c.AddCommand(expiriesCmd(g))
	return c
}

func expiriesCmd(g *globals) *cobra.Command {
	window := since(time.Hour)
	var limit int32
	c := &cobra.Command{
		Use:   "expiries [--since 1h]",
		Short: "Holds that ended by lease expiry, not release, per namespace and class: holders that stopped renewing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(func(ctx context.Context, c *lockclient.Client) error {
				r, err := adminv1.NewAdminServiceClient(c.Conn()).AuditExpiries(ctx, &adminv1.AuditExpiriesRequest{
					Since: timestamppb.New(window.ago()), Limit: limit})
				if err != nil {
					return err
				}
				if g.json() {
					printProto(r)
					return nil
				}
				if len(r.GetCounts()) == 0 {
					fmt.Printf("no holds ended by expiry in the last %s\n", window)
					return nil
				}
				w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAMESPACE\tCLASS\tEXPIRIES")
				for _, n := range r.GetCounts() {
					fmt.Fprintf(w, "%s\t%s\t%d\n", n.GetNamespace(), n.GetClass(), n.GetCount())
				}
				w.Flush()
				fmt.Println()
				printAudit(r.GetEvents(), r.GetTruncated())
				return nil
			})
		},
	}
	c.Flags().Var(&window, "since", "how far back: a Go duration or whole days (7d, 1d12h)")
	c.Flags().Int32Var(&limit, "limit", 0, "list at most this many expiries (default 100)")
	return c
}

func printAudit(evs []*adminv1.AuditEvent, truncated bool) {
	if len(evs) == 0 {
		fmt.Println("no events")
		return
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TIME\tKIND\tKEY\tHOLDER\tINSTANCE\tSESSION\tCLASS\tWAITED\tCLUSTER\tREVISION\tEPOCH\tDETAIL")
	for _, e := range evs {
		holder := e.GetIdentity()
		if e.GetKind() == "handoff" {
			holder = e.GetPrevIdentity() + " -> " + holder
		}
		// How long a grant's or handoff's request waited; "-" when it did not.
		waited := "-"
		if ms := e.GetWaitedMs(); ms > 0 {
			waited = (time.Duration(ms) * time.Millisecond).String()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n",
			e.GetAt().AsTime().Local().Format("2006-01-02 15:04:05.000"), e.GetKind(), dash(e.GetKey()), dash(holder),
			dash(e.GetInstance()), dashInt(e.GetSession()), dash(e.GetClass()), waited, e.GetCluster(), e.GetRevision(), e.GetEpoch(),
			oneLine(e.GetDetail()))
	}
	w.Flush()
	if truncated {
		fmt.Println("(more events: narrow --since or raise --limit)")
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func dashInt(n int64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

// oneLine keeps a detail (free text from the store) on one table row.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	q := strconv.Quote(s) // no control bytes reach the terminal
	return q[1 : len(q)-1]
}
