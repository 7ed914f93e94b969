package admin

import (
	"fmt"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// advisoryWarning is said of every hold of a class not known to be fenced.
const advisoryWarning = "class %s of %s is %s: nothing at the resource refuses the holder's late writes, so once the hold ends the holder (alive and renewing) and the next one may both write at once"

func (rec actionRecord) proto() *adminv1.Action {
	out := &adminv1.Action{Id: rec.ID, Kind: rec.Kind, State: rec.State, Requester: rec.Requester.proto(), Reason: rec.Reason,
		RequestedAt: timestamppb.New(rec.RequestedAt), ExpiresAt: timestamppb.New(rec.ExpiresAt), RevokeSession: rec.RevokeSession,
		DecisionReason: rec.DecisionReason}
	if rec.DecidedBy != nil {
		out.DecidedBy, out.DecidedAt = rec.DecidedBy.proto(), timestamppb.New(rec.DecidedAt)
	}
	if rec.Hold != nil {
		out.Hold = rec.Hold.proto()
		holds := []holdFact{*rec.Hold}
		for _, h := range rec.SessionHolds {
			out.SessionHolds = append(out.SessionHolds, h.proto())
			if h.Key != rec.Hold.Key {
				holds = append(holds, h)
			}
		}
		for _, h := range holds {
			switch h.Enforcement {
			case "fenced":
			case "":
				out.Warnings = append(out.Warnings, fmt.Sprintf(advisoryWarning, h.Class, h.Key, "not from the policy set, so not known to be fenced; treat it as advisory"))
			default:
				out.Warnings = append(out.Warnings, fmt.Sprintf(advisoryWarning, h.Class, h.Key, h.Enforcement))
			}
		}
		if rec.RevokeSession {
			out.Warnings = append(out.Warnings, fmt.Sprintf("the holder's whole session %d ends: every hold listed, and the holder must open a new session", rec.Hold.Session))
		}
	}
	if rec.Advance != nil {
		out.Advance = &adminv1.AdvanceEpochRequest{Cluster: rec.Advance.Cluster, ExpectedEpoch: rec.Advance.Expected, Reason: rec.Advance.Reason}
		if rec.Advance.Above != nil {
			out.Advance.Above = proto.Uint32(*rec.Advance.Above)
		}
		out.Warnings = append(out.Warnings, fmt.Sprintf("advancing cluster %s's epoch deletes every hold and waiter on it", rec.Advance.Cluster))
	}
	if rec.ShardAdd != nil {
		out.ShardAdd = rec.ShardAdd.proto()
		out.Warnings = append(out.Warnings, fmt.Sprintf(shardAddWarning, rec.ShardAdd.Shard, rec.ShardAdd.Shard))
		if rec.State == stateApproved && rec.Result != nil {
			out.ShardAddResult = &adminv1.ShardAddResult{Version: rec.Result.MapVersion, Shards: rec.Result.Shards}
		}
	}
	return out
}

func (o Operator) proto() *adminv1.Operator {
	return &adminv1.Operator{Issuer: o.Issuer, Subject: o.Subject, Name: o.Name}
}

func (h holdFact) proto() *adminv1.HoldFacts {
	return &adminv1.HoldFacts{Key: h.Key, Cluster: h.Cluster, Identity: h.Identity, Instance: h.Instance, Session: h.Session, Class: h.Class,
		Enforcement: h.Enforcement, Fenced: h.Enforcement == "fenced", Revision: h.Revision, Since: timestamppb.New(h.Since)}
}
