package archive_test

import (
	"testing"

	"github.com/lockplane/lockplane/services/audit/archive"
	"github.com/lockplane/lockplane/services/audit/chstore"
)

// The audit store is a Source, and a page never asks it for more than it
// serves: the archive does not link the store, so this keeps them equal.
var _ archive.Source = (*chstore.Store)(nil)

func TestAPageIsAtMostWhatTheStoreServes(t *testing.T) {
	if archive.MaxPageSize != chstore.MaxLimit {
		t.Fatalf("archive.MaxPageSize %d, chstore.MaxLimit %d: keep them equal", archive.MaxPageSize, chstore.MaxLimit)
	}
}
