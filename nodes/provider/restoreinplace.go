package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/lockplane/lockplane/dr/restore"
	"github.com/lockplane/lockplane/dr/snapshot"
	"github.com/lockplane/lockplane/nodes/remote"
	"github.com/lockplane/lockplane/services/client/token"
)

// ShardRestoreInputs restore a running entity shard in place from one
// snapshot in the region's snapshot store, while the rest of the region serves:
// every member is stopped before any data dir is touched, each member's
// data dir is moved aside (kept, never deleted) and replaced by the
// snapshot's, restored as a member of a new cluster (a token made here),
// so the shard comes back under a new cluster ID, sealed until two
// operators advance its epoch (ADR-03). It does not start the members:
// their Service resources are restarted by the restore's restoredAt in
// their triggers, so the same command line starts them as always.
//
// The restored revisions start above every revision the running shard
// reached (its head, read before any member stops, plus RevisionBump)
// and those below are marked compacted: a watcher resuming from a
// revision it saw (an arbiter's epoch watch, the audit tailer) is told
// its revisions are compacted and reads again, instead of waiting
// silently for revisions the restored shard reaches only later, and
// missing the operators' advance below them.
//
// Coord is never restored in place: the region's epochs are allocated
// from it, and an older coord could allocate them again. A DR stack
// restores it.
type ShardRestoreInputs struct {
	// Snapshot is a StoreSnapshot's manifest and SnapshotSha256 its
	// digest: one snapshot, chosen once, for every member.
	StoreSnapshotRef
	SnapshotSha256 string          `json:"snapshotSha256"`
	Members        []InPlaceMember `json:"members"`
	// Endpoints, CACertPem, CertPem and KeyPem reach the running shard
	// (the deployer's certificate, as EtcdCluster: Status needs no etcd
	// user) for its head revision.
	Endpoints []string `json:"endpoints"`
	CACertPem string   `json:"caCertPem"`
	CertPem   string   `json:"certPem"`
	KeyPem    string   `json:"keyPem"`
	// RevisionBump is how far above the head the restored revisions
	// start, at least 1: the margin for what the shard writes between
	// the read and the stop, and the whole bump when no member answers.
	RevisionBump int64 `json:"revisionBump"`
}

// InPlaceMember is one running member: its host, name, advertised peer
// URL and --data-dir, and the service that runs it.
type InPlaceMember struct {
	Connection remote.Target `json:"connection"`
	Name       string        `json:"name"`
	PeerURL    string        `json:"peerUrl"`
	DataDir    string        `json:"dataDir"`
	Service    ServiceRef    `json:"service"`
}

// ServiceRef names a Service on the member's host: enough to stop it.
type ServiceRef struct {
	Name     string `json:"name"`
	Mode     string `json:"mode"`
	StateDir string `json:"stateDir,omitempty"`
	UnitDir  string `json:"unitDir,omitempty"`
}

func (m *InPlaceMember) service() *ServiceInputs {
	return &ServiceInputs{Connection: m.Connection, Name: m.Service.Name, Mode: m.Service.Mode, StateDir: m.Service.StateDir, UnitDir: m.Service.UnitDir}
}

// restoreInputs is member m as an EtcdRestore would see it, which checks
// the member set, the snapshot store and the snapshot's name with one set of rules.
func (in *ShardRestoreInputs) restoreInputs(m InPlaceMember, token string) *EtcdRestoreInputs {
	members := map[string]string{}
	for _, o := range in.Members {
		members[o.Name] = o.PeerURL
	}
	return &EtcdRestoreInputs{Connection: m.Connection, DataDir: m.DataDir, StoreSnapshotRef: in.StoreSnapshotRef,
		SnapshotSha256: in.SnapshotSha256, MemberName: m.Name, Members: members, Token: token, RevisionBump: in.RevisionBump}
}

func (in *ShardRestoreInputs) validate() error {
	if in.Cluster == snapshot.CoordCluster {
		return errors.New("cluster: coord is never restored in place (the region's epochs are allocated from it, and an older coord " +
			"could allocate them again): restore the region with a DR stack (docs/dr.md)")
	}
	if in.Snapshot == Latest {
		return fmt.Errorf("snapshot: %q: give a StoreSnapshot's manifest, chosen once for every member", Latest)
	}
	if !sha256Hex.MatchString(in.SnapshotSha256) {
		return fmt.Errorf("snapshotSha256: %q must be the chosen manifest's sha256 (64 lower-case hex digits)", in.SnapshotSha256)
	}
	if len(in.Members) == 0 {
		return errors.New("members: every member of the shard is required: a member left running would keep the old cluster")
	}
	if len(in.Endpoints) == 0 {
		return errors.New("endpoints: the running shard's client URLs are required: its head revision sizes the revision bump")
	}
	if in.CACertPem == "" || in.CertPem == "" || in.KeyPem == "" {
		return errors.New("caCertPem, certPem, keyPem: a client certificate of the region's etcd CA is required to read the shard's head revision")
	}
	if in.RevisionBump < 1 {
		return fmt.Errorf("revisionBump: %d must be at least 1: the restored revisions must start above every revision the shard's watchers saw", in.RevisionBump)
	}
	names := map[string]bool{}
	for i, m := range in.Members {
		if names[m.Name] {
			return fmt.Errorf("members[%d].name: %q appears twice", i, m.Name)
		}
		names[m.Name] = true
		if err := in.restoreInputs(m, "checked").validate(); err != nil {
			return fmt.Errorf("members[%d] (%s): %w", i, m.Name, err)
		}
		if !serviceName.MatchString(m.Service.Name) {
			return fmt.Errorf("members[%d].service.name: %q must be the member's Service name", i, m.Service.Name)
		}
		switch m.Service.Mode {
		case ModeSystemd:
		case ModeSupervised:
			if err := validatePath(fmt.Sprintf("members[%d].service.stateDir", i), m.Service.StateDir); err != nil {
				return err
			}
		default:
			return fmt.Errorf("members[%d].service.mode: %q must be %s or %s", i, m.Service.Mode, ModeSystemd, ModeSupervised)
		}
	}
	return nil
}

// create restores the shard. Everything that can be checked is checked
// before the first member stops: every host answers, the snapshot is the
// one chosen and whole, and every member's data dir is made on this
// machine. A failure after that leaves the members stopped, and the next
// up runs the whole restore again (it moves aside whatever is there).
func (in *ShardRestoreInputs) create(ctx context.Context, env *Env) (map[string]any, error) {
	conns := make([]*remote.Conn, len(in.Members))
	for i, m := range in.Members {
		c, err := env.Pool.Dial(ctx, m.Connection)
		if err != nil {
			return nil, fmt.Errorf("members[%d] (%s): %w", i, m.Name, err)
		}
		conns[i] = c
	}
	man, work, file, err := in.ref().fetch(ctx, in.SnapshotSha256)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	// Read before any member stops: what the shard writes from here to
	// the stop is within the margin.
	head, err := in.head(ctx)
	if err != nil {
		return nil, err
	}
	bump := in.RevisionBump + max(head-man.Revision, 0)
	if man.Revision+bump > token.MaxRevision {
		return nil, fmt.Errorf("revisionBump: the restored revisions would start at %d, above the %d a token carries", man.Revision+bump, int64(token.MaxRevision))
	}
	// A new token each restore: a second restore of the shard must not
	// come back under the first one's cluster ID.
	tok := in.Region + "-" + in.Cluster + "-restored-" + randomHex(8)
	rc := restore.Cluster{Snapshot: file, Token: tok, RevisionBump: uint64(bump)}
	for _, m := range in.Members {
		rc.Members = append(rc.Members, restore.Member{Name: m.Name, PeerURL: m.PeerURL, DataDir: filepath.Join(work, "data-"+m.Name)})
	}
	id, err := rc.ClusterID()
	if err != nil {
		return nil, fmt.Errorf("members: %w", err)
	}
	if err := rc.All(); err != nil {
		return nil, err
	}

	// Every member stops before any data dir moves: a member left
	// running would keep a quorum of the old cluster beside the new.
	for i, m := range in.Members {
		sctx, cancel := context.WithTimeout(ctx, hostCall)
		err := stopService(sctx, env, m.service())
		cancel()
		if err != nil {
			return nil, fmt.Errorf("members[%d] (%s): stop %s: %w", i, m.Name, m.Service.Name, err)
		}
	}
	// A stop is a signal, not a proof (a process stuck on a dead disk
	// outlives SIGKILL; one started by hand has no service): no data dir
	// moves while any process still names one.
	for i, m := range in.Members {
		if pids, err := using(ctx, conns[i], m.DataDir); err != nil {
			return nil, fmt.Errorf("members[%d] (%s): %w", i, m.Name, err)
		} else if pids != "" {
			return nil, fmt.Errorf("members[%d] (%s): process %s on %s still runs with --data-dir %s after %s stopped: nothing was moved; "+
				"stop it, then run up again (the members stay stopped until then)", i, m.Name, pids, m.Connection.Host, m.DataDir, m.Service.Name)
		}
	}
	stamp := time.Now().UTC().Format("20060102T150405Z")
	aside := map[string]any{}
	for i, m := range in.Members {
		old := m.DataDir + ".replaced-" + stamp
		mctx, cancel := context.WithTimeout(ctx, hostCall)
		out, err := conns[i].Run(mctx, fmt.Sprintf("if [ -e %[1]s ]; then mv %[1]s %[2]s && echo moved; fi", remote.Quote(m.DataDir), remote.Quote(old)))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("members[%d] (%s): move %s aside: %w", i, m.Name, m.DataDir, err)
		}
		if out == "moved\n" {
			aside[m.Name] = old
		}
		cctx, cancel := context.WithTimeout(ctx, copyTimeout)
		err = conns[i].PutDir(cctx, filepath.Join(work, "data-"+m.Name), m.DataDir)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("members[%d] (%s): %w", i, m.Name, err)
		}
	}
	out := described(man)
	out["clusterId"] = id
	out["token"] = tok
	out["headRevision"], out["revisionsFrom"] = head, man.Revision+bump
	out["replaced"] = aside
	out["restoredAt"] = time.Now().UTC().Format(time.RFC3339Nano)
	return out, nil
}

// using lists the processes on the host with dir as one of their
// arguments (etcd's --data-dir), space-separated; none is "".
func using(ctx context.Context, c *remote.Conn, dir string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, hostCall)
	defer cancel()
	out, err := c.Run(ctx, fmt.Sprintf(`d=%s
for p in /proc/[0-9]*; do
  tr '\0' '\n' < "$p/cmdline" 2>/dev/null | grep -qxF -- "$d" && printf '%%s ' "${p#/proc/}"
done
true`, remote.Quote(dir)))
	if err != nil {
		return "", fmt.Errorf("list the processes using %s: %w", dir, err)
	}
	return strings.TrimSpace(out), nil
}

// head is the highest revision a member of the running shard answers
// with; 0 when none answers (a shard without quorum, whose leader-bound
// watches ended with its leader).
func (in *ShardRestoreInputs) head(ctx context.Context) (int64, error) {
	cli, err := tlsClient(in.Endpoints, in.CACertPem, in.CertPem, in.KeyPem, "", "")
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	var head int64
	for _, ep := range in.Endpoints {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := cli.Status(sctx, ep)
		cancel()
		if err == nil {
			head = max(head, st.Header.Revision)
		}
	}
	return head, nil
}

func init() {
	register("ShardRestore", spec[ShardRestoreInputs]{
		Validate: func(in *ShardRestoreInputs) error { return in.validate() },
		Create: func(ctx context.Context, env *Env, in *ShardRestoreInputs) (string, map[string]any, error) {
			out, err := in.create(ctx, env)
			if err != nil {
				return "", nil, err
			}
			return in.Region + "/" + in.Cluster + "@" + path.Base(in.Snapshot), out, nil
		},
		// Done once: the running members change what was restored, and
		// a restore is never repeated by a refresh.
		Read: nil,
		// A new snapshot store user, URL or CA, new connections, certificates or
		// revision bump, or even new members restore nothing again: the
		// restore is what was done.
		Update: func(_ context.Context, _ *Env, _ string, _, _ *ShardRestoreInputs, st map[string]any) (map[string]any, error) {
			return st, nil
		},
		// Another snapshot is a new restore of the shard.
		Replaces: []string{"region", "cluster", "snapshot", "snapshotSha256"},
		// The data dirs stay, and those moved aside too: an operator
		// removes them once the shard is unsealed and checked.
		Delete:  nil,
		Secrets: []string{"vaultSecretKey", "keyPem", "token"},
	})
}
