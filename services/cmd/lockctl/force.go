package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/internal/arbiter/admin"
	"github.com/lockplane/lockplane/services/operator/login"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// idTokenEnv names the operator's cached ID token file when
// --id-token-file is not given.
const idTokenEnv = "LOCKPLANE_ID_TOKEN_FILE"

// errNotSignedIn is what every two-person command says without a token.
var errNotSignedIn = errors.New("not signed in: run lockctl login")

// idTokenFile is the operator's ID token cache: the flag, the environment,
// or where lockctl login caches it by default.
func (g *globals) idTokenFile() (string, error) {
	switch {
	case g.idToken != "":
		return g.idToken, nil
	case os.Getenv(idTokenEnv) != "":
		return os.Getenv(idTokenEnv), nil
	}
	p, err := login.DefaultCachePath()
	if err != nil {
		return "", fmt.Errorf("%w (no --id-token-file, $%s or user cache directory)", errNotSignedIn, idTokenEnv)
	}
	return p, nil
}

// operatorToken returns the signed-in operator's raw ID token from the
// login cache, or says to run lockctl login (none, or expired). The
// arbiter verifies it (issuer, audience, expiry, role, second factor).
func (g *globals) operatorToken() (string, error) {
	path, err := g.idTokenFile()
	if err != nil {
		return "", err
	}
	tok, err := login.Cached(path)
	if err != nil {
		return "", err
	}
	return tok.IDToken, nil
}

// asOperator runs fn with the admin client, its calls carrying the
// operator's ID token ("authorization: Bearer ..."), bounded by --timeout.
func (g *globals) asOperator(fn func(ctx context.Context, admin adminv1.AdminServiceClient) error) error {
	tok, err := g.operatorToken()
	if err != nil {
		return err
	}
	return g.call(func(ctx context.Context, c *lockclient.Client) error {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
		return fn(ctx, adminv1.NewAdminServiceClient(c.Conn()))
	})
}

func forceReleaseCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "force-release",
		Short: "End another's hold: one operator requests, a different one approves (ADR-20)",
		Long: `force-release ends a hold its holder will not release (a leaked lock: the holder is
alive and renewing). One signed-in operator requests it with a reason; a different
signed-in operator approves it. Both are shown, before anything else, the key's
holder, class and whether the class is fenced (the resource refuses the holder's
late writes) or advisory (nothing does: two writers may act at once once the hold
ends). Approval ends the hold in one transaction only if it is still the hold
requested, and writes a /sys/force record kept 24 hours and archived for seven
years. The holder's next keepalive tells it: its OnFence runs, lockctl run sends
its command SIGTERM. Requests expire (1 h by default). See docs/force-release.md.

Operators sign in with lockctl login, which caches an ID token; these commands read
it from --id-token-file, $` + idTokenEnv + `, or the user cache directory.`,
	}
	var why string
	var revoke bool
	req := &cobra.Command{
		Use:   "request KEY --reason TEXT [--revoke-session]",
		Short: "Request that KEY's hold end; prints the request ID and the facts",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.asOperator(func(ctx context.Context, admin adminv1.AdminServiceClient) error {
				r, err := admin.RequestForceRelease(ctx, &adminv1.RequestForceReleaseRequest{Key: args[0], Reason: why, RevokeSession: revoke})
				if err != nil {
					return err
				}
				g.printRequested(r, r.GetAction(), "force-release")
				return nil
			})
		},
	}
	req.Flags().StringVar(&why, "reason", "", "why the hold must end (required; kept in the force record)")
	req.Flags().BoolVar(&revoke, "revoke-session", false, "end the holder's whole session: every hold of it on that cluster")
	c.AddCommand(req, approveCmd(g, "force_release"), denyCmd(g, "force_release"), listCmd(g, "force_release"), showCmd(g, "force_release"))
	return c
}

// printRequested prints a new request: its ID and facts first, then who
// may approve it and how (the command group: force-release or epoch).
func (g *globals) printRequested(r proto.Message, a *adminv1.Action, group string) {
	if g.json() {
		printProto(r)
		return
	}
	fmt.Printf("request %s\n", a.GetId())
	printAction(os.Stdout, a)
	fmt.Printf("\na different operator approves it with: lockctl %s approve %s\n", group, a.GetId())
}

// approveCmd shows a request's facts again, then approves it. Both kinds
// share it: the request says what approval does.
func approveCmd(g *globals, kind string) *cobra.Command {
	return &cobra.Command{
		Use:   "approve ID",
		Short: "Show the request's facts again, then carry it out (a different operator from the requester)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.asOperator(func(ctx context.Context, admin adminv1.AdminServiceClient) error {
				got, err := admin.GetAction(ctx, &adminv1.GetActionRequest{Id: args[0]})
				if err != nil {
					return err
				}
				if got.GetAction().GetKind() != kind {
					return exitErr{exitUsage, fmt.Errorf("request %s is a %s, not a %s: approve it with the %s command", args[0],
						got.GetAction().GetKind(), kind, commandOf(got.GetAction().GetKind()))}
				}
				if !g.json() {
					printAction(os.Stdout, got.GetAction())
					fmt.Println()
				}
				r, err := admin.ApproveAction(ctx, &adminv1.ApproveActionRequest{Id: args[0]})
				if err != nil {
					return err
				}
				if g.json() {
					printProto(r)
					return nil
				}
				if fr := r.GetForceRelease(); fr != nil {
					fmt.Printf("released %s at revision %d; force record %s (kept 24 h)\n", strings.Join(fr.GetReleased(), ", "), fr.GetRevision(), fr.GetRecord())
					if fr.GetSessionRevoked() {
						fmt.Printf("session %d revoked\n", r.GetAction().GetHold().GetSession())
					}
				}
				if ea := r.GetEpochAdvance(); ea != nil {
					printAdvance(ea)
				}
				if sa := r.GetShardAdd(); sa != nil {
					printShardAdded(sa)
				}
				return nil
			})
		},
	}
}

func commandOf(kind string) string {
	switch kind {
	case "epoch_advance":
		return "lockctl epoch"
	case "shard_add":
		return "lockctl shards"
	}
	return "lockctl force-release"
}

func denyCmd(g *globals, kind string) *cobra.Command {
	var why string
	c := &cobra.Command{
		Use:   "deny ID --reason TEXT",
		Short: "Refuse a pending request (or withdraw your own)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.asOperator(func(ctx context.Context, admin adminv1.AdminServiceClient) error {
				r, err := admin.DenyAction(ctx, &adminv1.DenyActionRequest{Id: args[0], Reason: why})
				if err != nil {
					return err
				}
				if g.json() {
					printProto(r)
					return nil
				}
				fmt.Printf("request %s denied\n", r.GetAction().GetId())
				return nil
			})
		},
	}
	c.Flags().StringVar(&why, "reason", "", "why (required)")
	return c
}

func listCmd(g *globals, kind string) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "Requests not yet expired: pending and decided",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.asOperator(func(ctx context.Context, admin adminv1.AdminServiceClient) error {
				r, err := admin.ListActions(ctx, &adminv1.ListActionsRequest{Kind: kind})
				if err != nil {
					return err
				}
				if g.json() {
					printProto(r)
					return nil
				}
				tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tSTATE\tWHAT\tREQUESTER\tEXPIRES IN\tREASON")
				for _, a := range r.GetActions() {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", a.GetId(), a.GetState(), printable(what(a)), printable(operatorName(a.GetRequester())),
						time.Until(a.GetExpiresAt().AsTime()).Round(time.Second), printable(a.GetReason()))
				}
				return tw.Flush()
			})
		},
	}
}

func showCmd(g *globals, kind string) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "A request's facts and state",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.asOperator(func(ctx context.Context, admin adminv1.AdminServiceClient) error {
				r, err := admin.GetAction(ctx, &adminv1.GetActionRequest{Id: args[0]})
				if err != nil {
					return err
				}
				if g.json() {
					printProto(r)
					return nil
				}
				fmt.Printf("request %s\n", r.GetAction().GetId())
				printAction(os.Stdout, r.GetAction())
				return nil
			})
		},
	}
}

func what(a *adminv1.Action) string {
	if h := a.GetHold(); h != nil {
		s := "release " + h.GetKey()
		if a.GetRevokeSession() {
			s += fmt.Sprintf(" + session %d", h.GetSession())
		}
		return s
	}
	if ad := a.GetAdvance(); ad != nil {
		return fmt.Sprintf("advance %s from epoch %d", ad.GetCluster(), ad.GetExpectedEpoch())
	}
	if sa := a.GetShardAdd(); sa != nil {
		return "add shard " + sa.GetShard()
	}
	return a.GetKind()
}

// printable is s with every character of the arbiter's operator-text
// rule (admin.HiddenRune: control characters, newline included, format
// characters, line and paragraph separators, private-use, unassigned and
// other invisible characters) and every combining mark past
// admin.MaxCombiningRun in a row escaped as Go would quote it (\u or \U
// where Go would print it as is), and any byte that is not UTF-8 as \xNN:
// text from another operator (a reason, a name) must not move the cursor,
// rewrite lines, hide itself or reorder what the approver reads, hiding a
// warning.
func printable(s string) string {
	var b strings.Builder
	marks := 0
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if admin.CombiningMark(r) {
			marks++
		} else {
			marks = 0
		}
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case admin.HiddenRune(r) || marks > admin.MaxCombiningRun:
			b.WriteString(escaped(r))
		default:
			b.WriteRune(r)
		}
		s = s[n:]
	}
	return b.String()
}

// escaped is r as Go quotes it, or as \u or \U where Go would print it
// as is (a default-ignorable letter, a variation selector, a mark).
func escaped(r rune) string {
	q := strconv.QuoteRune(r)
	if q = q[1 : len(q)-1]; q != string(r) {
		return q
	}
	if r > 0xffff {
		return fmt.Sprintf(`\U%08x`, r)
	}
	return fmt.Sprintf(`\u%04x`, r)
}

// continued starts each line of multi-line operator text after the first
// in lockctl's detail views: indented and marked, it cannot pass for a
// line of lockctl's own ("state  approved", "WARNING: ..."); in a
// tabwriter the tab keeps it under the text's first line.
const continued = "\n\t    | "

// printableLines is printable(s) with its newlines kept as line breaks,
// each line after the first starting with continued: for a reason shown
// on lines of its own.
func printableLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = printable(l)
	}
	return strings.Join(lines, continued)
}

func operatorName(o *adminv1.Operator) string {
	if o.GetName() != "" {
		return o.GetName()
	}
	return o.GetSubject()
}

// printAction prints the facts first: what the request would end, who
// holds it, whether the class is fenced, the warnings; then who asked,
// why, and its state.
func printAction(w io.Writer, a *adminv1.Action) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	holds := a.GetSessionHolds()
	if len(holds) == 0 && a.GetHold() != nil {
		holds = []*adminv1.HoldFacts{a.GetHold()}
	}
	for _, h := range holds {
		enf := h.GetEnforcement()
		switch {
		case h.GetFenced():
			enf = "fenced: the resource refuses the holder's late writes by their token"
		case enf == "":
			enf = "unknown (not from the policy set): treat as advisory"
		default:
			enf += ": nothing at the resource refuses the holder's late writes"
		}
		fmt.Fprintf(tw, "key\t%s\n", h.GetKey())
		fmt.Fprintf(tw, "cluster\t%s\n", h.GetCluster())
		fmt.Fprintf(tw, "holder\t%s (instance %s)\n", printable(h.GetIdentity()), printable(dash(h.GetInstance())))
		fmt.Fprintf(tw, "session\t%d\n", h.GetSession())
		fmt.Fprintf(tw, "class\t%s\n", printable(h.GetClass()))
		fmt.Fprintf(tw, "enforcement\t%s\n", enf)
		fmt.Fprintf(tw, "held since\t%s (revision %d)\n", h.GetSince().AsTime().Format(time.RFC3339), h.GetRevision())
	}
	if sa := a.GetShardAdd(); sa != nil {
		fmt.Fprintf(tw, "add shard\t%s\n", printable(sa.GetShard()))
		if res := a.GetShardAddResult(); res != nil {
			fmt.Fprintf(tw, "map stored\tversion %d over %s\n", res.GetVersion(), printable(strings.Join(res.GetShards(), ", ")))
		}
	}
	if ad := a.GetAdvance(); ad != nil {
		fmt.Fprintf(tw, "cluster\t%s\n", ad.GetCluster())
		fmt.Fprintf(tw, "expected epoch\t%d\n", ad.GetExpectedEpoch())
		if ad.Above != nil {
			fmt.Fprintf(tw, "above\t%d\n", ad.GetAbove())
		}
	}
	tw.Flush()
	for _, warn := range a.GetWarnings() {
		fmt.Fprintf(w, "WARNING: %s\n", printable(warn))
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "requested by\t%s (%s %s)\n", printable(operatorName(a.GetRequester())), printable(a.GetRequester().GetIssuer()), printable(a.GetRequester().GetSubject()))
	fmt.Fprintf(tw, "reason\t%s\n", printableLines(a.GetReason()))
	state := a.GetState()
	if a.GetDecidedBy() != nil {
		state += " by " + printable(operatorName(a.GetDecidedBy()))
		if a.GetDecisionReason() != "" {
			state += ": " + printableLines(a.GetDecisionReason())
		}
	}
	fmt.Fprintf(tw, "state\t%s\n", state)
	fmt.Fprintf(tw, "expires\t%s\n", a.GetExpiresAt().AsTime().Format(time.RFC3339))
	tw.Flush()
}
