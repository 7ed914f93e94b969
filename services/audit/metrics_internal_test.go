package audit

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A tailer that reads a range again from its checkpoint (deposed and
// elected again in the same process) counts its holds once.
func TestHoldsReadAgainAreCountedOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	batch := []Event{
		{Cluster: "coord", Revision: 7, Key: "team-a/x", Namespace: "team-a", Class: "c", Kind: Expiry, At: time.Unix(20, 0), heldSince: time.Unix(10, 0)},
		{Cluster: "coord", Revision: 9, Key: "team-a/y", Namespace: "team-a", Class: "c", Kind: Expiry, At: time.Unix(20, 0), heldSince: time.Unix(10, 0)},
	}
	m.stored("coord", 9, batch)
	m.stored("coord", 9, batch) // read again from the checkpoint
	m.stored("coord", 12, []Event{{Cluster: "coord", Revision: 12, Key: "team-a/z", Namespace: "team-a", Class: "c", Kind: Expiry, At: time.Unix(20, 0)}})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "lockplane_expiries_total" {
			if v := f.GetMetric()[0].GetCounter().GetValue(); v != 3 {
				t.Fatalf("expiries %v, want 3: a range read again was counted again", v)
			}
			return
		}
	}
	t.Fatal("no lockplane_expiries_total")
}
