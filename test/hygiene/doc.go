// Package hygiene checks the repository itself: that build outputs are
// ignored by git and that `make hygiene` tells executables from text.
package hygiene
