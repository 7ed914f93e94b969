package admin

import (
	"context"
	"fmt"
	"strings"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
)

// advanceMark is how an epoch record's reason names the request that
// advanced it (approveAdvance's "by", in advanceEpoch's reason).
func advanceMark(id string) string { return ", request " + id + " at " }

// advancedBy reports whether an epoch record's reason was written by
// request id's advance. advanceEpoch writes the requester's reason first
// and its own tail last: " (by ..., request ID at TIME)". Only that tail
// is the server's, so the mark counts only there: a reason quoting another
// request's mark cannot make it read back as carried out (issue 32).
func advancedBy(reason, id string) bool {
	head, ok := strings.CutSuffix(reason, ")")
	if !ok {
		return false
	}
	i := strings.LastIndex(head, " at ")
	if i < 0 {
		return false
	}
	if _, err := time.Parse(time.RFC3339, head[i+len(" at "):]); err != nil {
		return false
	}
	return strings.HasSuffix(head[:i+len(" at ")], advanceMark(id))
}

// approveAdvance runs an approved epoch advance. Whatever its error, the
// epoch record is read back: an advance that committed though its answer
// was lost (or that a retry finds already made, EPOCH_CHANGED) is this
// request's success.
func (s *Server) approveAdvance(ctx context.Context, rec actionRecord, approver Operator) (*adminv1.AdvanceEpochResponse, error) {
	adv := rec.Advance
	req := &adminv1.AdvanceEpochRequest{Cluster: adv.Cluster, ExpectedEpoch: adv.Expected, Reason: adv.Reason, Above: adv.Above}
	by := fmt.Sprintf("requested by %s, approved by %s, request %s", rec.Requester.String(), approver.String(), rec.ID)
	var (
		out *adminv1.AdvanceEpochResponse
		err error
	)
	run, herr := s.actionTxnHook(rec.ID)
	if run {
		out, err = s.advanceEpoch(ctx, by, req)
	}
	if herr != nil {
		err = s.advanceFailure(ctx, herr)
	}
	if err == nil {
		return out, nil
	}
	res, done, rerr := s.outcome(ctx, rec)
	switch {
	case rerr != nil:
		if precondition(err) {
			return nil, err
		}
		return nil, unsettled{err}
	case done:
		s.log().Warn("epoch advance read back as made", "action", rec.ID, "err", err)
		return &adminv1.AdvanceEpochResponse{Epoch: res.Epoch, PreviousEpoch: adv.Expected, Revision: res.Revision}, nil
	}
	return nil, err
}
