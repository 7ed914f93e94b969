package spire

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// fakeEntries is an entry API in memory that pages one entry at a time
// and can fail the creation of one SPIFFE ID: what Sync must cope with
// beyond the real server's happy path.
type fakeEntries struct {
	entryv1.EntryClient
	entries  []*types.Entry
	failFor  string
	nextID   int
	lists    int
	updated  []*types.Entry
	deletedN int
}

func (f *fakeEntries) ListEntries(_ context.Context, req *entryv1.ListEntriesRequest, _ ...grpc.CallOption) (*entryv1.ListEntriesResponse, error) {
	f.lists++
	var match []*types.Entry
	for _, e := range f.entries {
		if idString(e.ParentId) == idString(req.Filter.ByParentId) {
			match = append(match, e)
		}
	}
	start := 0
	fmt.Sscan(req.PageToken, &start)
	if start >= len(match) {
		return &entryv1.ListEntriesResponse{}, nil
	}
	resp := &entryv1.ListEntriesResponse{Entries: match[start : start+1]}
	if start+1 < len(match) {
		resp.NextPageToken = fmt.Sprint(start + 1)
	}
	return resp, nil
}

func (f *fakeEntries) BatchCreateEntry(_ context.Context, req *entryv1.BatchCreateEntryRequest, _ ...grpc.CallOption) (*entryv1.BatchCreateEntryResponse, error) {
	resp := &entryv1.BatchCreateEntryResponse{}
	for _, e := range req.Entries {
		if idString(e.SpiffeId) == f.failFor {
			resp.Results = append(resp.Results, &entryv1.BatchCreateEntryResponse_Result{Status: &types.Status{Code: int32(codes.InvalidArgument), Message: "refused"}})
			continue
		}
		f.nextID++
		e.Id = fmt.Sprint("id-", f.nextID)
		f.entries = append(f.entries, e)
		resp.Results = append(resp.Results, &entryv1.BatchCreateEntryResponse_Result{Status: &types.Status{}})
	}
	return resp, nil
}

func (f *fakeEntries) BatchUpdateEntry(_ context.Context, req *entryv1.BatchUpdateEntryRequest, _ ...grpc.CallOption) (*entryv1.BatchUpdateEntryResponse, error) {
	resp := &entryv1.BatchUpdateEntryResponse{}
	for _, e := range req.Entries {
		f.updated = append(f.updated, e)
		for _, have := range f.entries {
			m := req.InputMask
			if have.Id == e.Id && m.Admin && m.X509SvidTtl && m.Downstream && m.ExpiresAt && m.DnsNames && m.FederatesWith && m.StoreSvid && m.Hint && m.JwtSvidTtl {
				have.Admin, have.X509SvidTtl = e.Admin, e.X509SvidTtl
			}
		}
		resp.Results = append(resp.Results, &entryv1.BatchUpdateEntryResponse_Result{Status: &types.Status{}})
	}
	return resp, nil
}

func (f *fakeEntries) BatchDeleteEntry(_ context.Context, req *entryv1.BatchDeleteEntryRequest, _ ...grpc.CallOption) (*entryv1.BatchDeleteEntryResponse, error) {
	resp := &entryv1.BatchDeleteEntryResponse{}
	for _, id := range req.Ids {
		for i, e := range f.entries {
			if e.Id == id {
				f.entries = append(f.entries[:i], f.entries[i+1:]...)
				f.deletedN++
				break
			}
		}
		resp.Results = append(resp.Results, &entryv1.BatchDeleteEntryResponse_Result{Status: &types.Status{}})
	}
	return resp, nil
}

func TestSyncPagesRemovesDuplicatesResetsDriftAndStopsAtARefusal(t *testing.T) {
	const td = "fake.test"
	agent := AgentID(td, "h1")
	mk := func(name string) Entry {
		e, err := NewEntry("spiffe://"+td+"/ns/t/sa/"+name, agent, []string{"unix:uid:1"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	a, b := mk("a"), mk("b")
	f := &fakeEntries{}
	for i, e := range []Entry{a, a, b} { // a twice: one is a duplicate
		te := toAPI(e)
		te.Id = fmt.Sprint("old-", i)
		f.entries = append(f.entries, te)
	}
	f.entries[2].Admin = true // b made an admin out of band
	drift, err := Drift(context.Background(), f, []string{agent}, []Entry{a, b})
	if err != nil || !drift.Changed() || len(f.updated) != 0 || f.deletedN != 0 {
		t.Fatalf("Drift: %+v, %v; want a change reported and nothing changed", drift, err)
	}
	f.lists = 0
	rep, err := Sync(context.Background(), f, []string{agent}, []Entry{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if f.lists < 3 || len(rep.Deleted) != 1 || len(rep.Updated) != 1 || rep.Unchanged != 1 || len(f.entries) != 2 || f.entries[1].Admin {
		t.Fatalf("lists %d, report %+v, entries %v; want every page read, the duplicate deleted and b's admin flag reset", f.lists, rep, f.entries)
	}
	if d, _ := Drift(context.Background(), f, []string{agent}, []Entry{a, b}); d.Changed() {
		t.Fatalf("after the sync: %+v", d)
	}
	// A refused creation stops the sync before anything is deleted.
	c := mk("c")
	f.failFor = c.SPIFFEID
	_, err = Sync(context.Background(), f, []string{agent}, []Entry{c})
	if err == nil || !strings.Contains(err.Error(), "create entry "+c.SPIFFEID) || len(f.entries) != 2 {
		t.Fatalf("a refused creation: %v, %d entries left; want the error naming it and a and b kept", err, len(f.entries))
	}
}
