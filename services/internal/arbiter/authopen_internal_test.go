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

// build builds an Arbiter, or a Router over two shards, of cfg.
func build(router bool, cfg Config) error {
	if router {
		_, err := NewRouter(RouterConfig{Config: cfg, Shards: map[string]Etcd{"a": unreachableEtcd{}, "b": unreachableEtcd{}}})
		return err
	}
	_, err := New(cfg)
	return err
}

// Open authorisation is AllowAnyWorkload and nothing else: the open
// authorizer handed over as an Authorizer, by value or by pointer, is
// refused rather than run open unreported. Checking a configuration twice
// (a Router checks its base, then each arbiter's) gives the same answer.
func TestOpenAuthorisationIsTheFlagNotTheAuthorizersType(t *testing.T) {
	for _, router := range []bool{false, true} {
		for name, az := range map[string]Authorizer{"value": allowTrustDomain{}, "pointer": &allowTrustDomain{}} {
			reg := prometheus.NewRegistry()
			err := build(router, Config{Etcd: unreachableEtcd{}, Authorizer: az, Metrics: reg})
			if err == nil || !strings.Contains(err.Error(), "Config.Authorizer") || !strings.Contains(err.Error(), "AllowAnyWorkload") {
				t.Errorf("router %v, the open authorizer by %s as Config.Authorizer: %v (lockplane_authorization_open %v), want a refusal naming AllowAnyWorkload",
					router, name, err, gaugeOr(reg, "lockplane_authorization_open", -1))
			}
		}
	}
	for _, cfg := range []Config{{Etcd: unreachableEtcd{}, AllowAnyWorkload: true}, {Etcd: unreachableEtcd{}, Authorizer: denyAll{}}} {
		once, err := cfg.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := once.withDefaults(); err != nil {
			t.Errorf("withDefaults twice (AllowAnyWorkload %v): %v", cfg.AllowAnyWorkload, err)
		}
	}
}

// A binary that uses etcd without users says so through the library, as
// open authorisation is: a warning at start and lockplane_etcd_auth_off.
func TestEtcdWithoutAuthIsLoggedAndExported(t *testing.T) {
	for _, router := range []bool{false, true} {
		for _, without := range []bool{false, true} {
			var logs bytes.Buffer
			reg := prometheus.NewRegistry()
			cfg := Config{Etcd: unreachableEtcd{}, AllowAnyWorkload: true, EtcdWithoutAuth: without, Metrics: reg,
				Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
			if err := build(router, cfg); err != nil {
				t.Fatal(err)
			}
			want := 0.0
			if without {
				want = 1
			}
			if got := gauge(t, reg, "lockplane_etcd_auth_off"); got != want {
				t.Errorf("router %v, EtcdWithoutAuth %v: lockplane_etcd_auth_off %v, want %v", router, without, got, want)
			}
			if warned := strings.Count(logs.String(), `"level":"WARN","msg":"etcd authentication is not used`); warned != int(want) {
				t.Errorf("router %v, EtcdWithoutAuth %v: warned %d times, want %v:\n%s", router, without, warned, want, logs.String())
			}
		}
	}
}

// gaugeOr is the value of the unlabelled gauge name in reg, or or.
func gaugeOr(reg *prometheus.Registry, name string, or float64) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return or
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
