//go:build !lockplane_broken_batch

package arbiter

// brokenBatch is false in every build but the gate's negative control.
const brokenBatch = false
