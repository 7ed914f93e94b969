//go:build lockplane_broken_batch

package arbiter

// brokenBatch makes a group commit drop the first compare (the key is
// free) of every request after the first: the negative control the
// release gate must catch (test/gate/runner). Every batched request loses
// it, not only the second, so that a short history is sure to grant a
// held key. Never built into a release.
const brokenBatch = true
