package devenv_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/devenv"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

type denyAll struct{}

func (denyAll) MayLock(spiffeid.ID, string) bool { return false }

// devenv.Start follows the arbiter's one authorisation rule (exactly one of
// an Authorizer and AllowAnyWorkload), in its own option names, before it
// starts anything. devenvtest.Start chooses AllowAnyWorkload for tests
// that give no Authorizer; devenv itself never does.
func TestStartRefusesNeitherOrBothAuthorisations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name string
		opts devenv.Options
		want []string
	}{
		{"neither", devenv.Options{}, []string{"Options.Authorizer", "Options.AllowAnyWorkload", "required"}},
		{"both", devenv.Options{Authorizer: denyAll{}, AllowAnyWorkload: true}, []string{"Options.Authorizer", "Options.AllowAnyWorkload", "choose one"}},
	} {
		tc.opts.Dir = t.TempDir()
		env, err := devenv.Start(ctx, tc.opts)
		if err == nil {
			env.Close()
			t.Fatalf("%s: started", tc.name)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want it to say %q", tc.name, err, w)
			}
		}
		if _, err := os.Stat(filepath.Join(tc.opts.Dir, "etcd")); err == nil {
			t.Errorf("%s: etcd was started before the refusal", tc.name)
		}
	}
}
