package shardmap

import (
	"fmt"
	"testing"
)

// Adding a shard to N moves about 1/(N+1) of ranges, every one of them to
// the new shard; no range moves between old shards.
func TestAddingAShardMovesAboutOneNth(t *testing.T) {
	const ranges = 20000
	for _, n := range []int{1, 2, 3, 7} {
		var old Map
		for i := 1; i <= n; i++ {
			old.Shards = append(old.Shards, fmt.Sprintf("entity-%d", i))
		}
		old.Version, old.Adding = 1, fmt.Sprintf("entity-%d", n+1)
		next := old.Next()
		moved := 0
		for i := 0; i < ranges; i++ {
			key := fmt.Sprintf("ns-%d/range-%d/key", i%97, i)
			from, to := old.Home(key), next.Home(key)
			if from == to {
				if old.Moving(key) {
					t.Fatalf("%s stays on %s but is marked moving", key, from)
				}
				continue
			}
			moved++
			if to != old.Adding || !old.Moving(key) {
				t.Fatalf("%s moved %s -> %s, not to the added shard %s", key, from, to, old.Adding)
			}
		}
		frac, want := float64(moved)/ranges, 1/float64(n+1)
		t.Logf("%d -> %d shards: %.4f of ranges moved (1/N = %.4f)", n, n+1, frac, want)
		if frac < want*0.9 || frac > want*1.1 {
			t.Fatalf("%d -> %d shards moved %.4f of ranges, want about %.4f", n, n+1, frac, want)
		}
	}
}

// Every key of a range is homed together, so a range moves as one.
func TestKeysOfARangeShareAHome(t *testing.T) {
	m := Map{Version: 1, Shards: []string{"entity-1", "entity-2", "entity-3"}}
	for i := 0; i < 100; i++ {
		r := fmt.Sprintf("team-a/orders-%d", i)
		if m.Home(r+"/1") != m.Home(r+"/2/deeper") {
			t.Fatalf("keys of range %s are homed apart", r)
		}
	}
	if Range("team-a/orders/42") != "team-a/orders" {
		t.Fatal(Range("team-a/orders/42"))
	}
}

func TestValidateNamesTheRule(t *testing.T) {
	for _, c := range []struct {
		m    Map
		want string
	}{
		{Map{Version: 0, Shards: []string{"a"}}, "version: 0 must be at least 1"},
		{Map{Version: 1}, "shards: at least one entity shard is required"},
		{Map{Version: 1, Shards: []string{"a", "a"}}, `shards: "a" is empty or named twice`},
		{Map{Version: 1, Shards: []string{"a"}, Adding: "a"}, `shards: "a" is empty or named twice`},
	} {
		err := c.m.Validate()
		if err == nil || err.Error() != "shardmap: "+c.want {
			t.Errorf("%+v: got %v, want %q", c.m, err, c.want)
		}
	}
	if err := (Map{Version: 1, Shards: []string{"a"}, Adding: "b"}).Validate(); err != nil {
		t.Fatal(err)
	}
}
