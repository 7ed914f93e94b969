package arbiter

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// unreachableEtcd answers every read with an error, so that a scrape's
// live counts skip it.
type unreachableEtcd struct{ nilEtcd }

func (unreachableEtcd) Get(context.Context, string, ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return nil, errors.New("unreachable")
}

type denyAll struct{}

func (denyAll) MayLock(spiffeid.ID, string) bool { return false }

// Without an Authorizer the arbiter refuses to be built unless told to run
// open, naming both fields; told, it says so once at start, however many
// clusters it serves, and exports it.
func TestOpenAuthorisationIsExplicitLoggedAndExported(t *testing.T) {
	build := func(router bool, cfg Config) error {
		if router {
			_, err := NewRouter(RouterConfig{Config: cfg, Shards: map[string]Etcd{"a": unreachableEtcd{}, "b": unreachableEtcd{}}})
			return err
		}
		_, err := New(cfg)
		return err
	}
	for _, router := range []bool{false, true} {
		err := build(router, Config{Etcd: unreachableEtcd{}})
		if err == nil || !strings.Contains(err.Error(), "Config.Authorizer") || !strings.Contains(err.Error(), "Config.AllowAnyWorkload") {
			t.Fatalf("router %v, neither Authorizer nor AllowAnyWorkload: %v, want a refusal naming both", router, err)
		}
		if err := build(router, Config{Etcd: unreachableEtcd{}, Authorizer: denyAll{}, AllowAnyWorkload: true}); err == nil || !strings.Contains(err.Error(), "choose one") {
			t.Fatalf("router %v, both: %v, want a refusal", router, err)
		}
		for _, tc := range []struct {
			name string
			cfg  Config
			want float64
		}{
			{"open", Config{AllowAnyWorkload: true}, 1},
			{"a policy", Config{Authorizer: denyAll{}}, 0},
		} {
			var logs bytes.Buffer
			reg := prometheus.NewRegistry()
			cfg := tc.cfg
			cfg.Etcd, cfg.Metrics, cfg.Logger = unreachableEtcd{}, reg, slog.New(slog.NewJSONHandler(&logs, nil))
			if err := build(router, cfg); err != nil {
				t.Fatalf("router %v, %s: %v", router, tc.name, err)
			}
			if got := gauge(t, reg, "lockplane_authorization_open"); got != tc.want {
				t.Errorf("router %v, %s: lockplane_authorization_open %v, want %v", router, tc.name, got, tc.want)
			}
			warned := strings.Count(logs.String(), `"level":"WARN","msg":"authorisation is open`)
			if want := int(tc.want); warned != want {
				t.Errorf("router %v, %s: logged open authorisation %d times, want %d:\n%s", router, tc.name, warned, want, logs.String())
			}
		}
	}
}

// gauge is the value of the unlabelled gauge name in reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("%s: not exported", name)
	return 0
}
