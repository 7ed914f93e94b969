// Package images builds the OCI images Lockplane deploys (the arbiter,
// lockplane-node and etcd) without a container engine.
//
// Each image is FROM SCRATCH: one layer holding one static Go binary, and a
// config whose Entrypoint is that binary and whose User is 65532:65532.
// Guaranteed: the same binary bytes and the same Spec give the same image
// digest, on any machine and at any time. Nothing in the layer or config
// comes from the clock, the builder's user, or the file's stat other than
// its contents: tar entries carry mtime 0, uid/gid 0 with no names, and a
// fixed mode; the config's created time is the Unix epoch.
//
// The package lives in its own Go module so the product's go.mod does not
// carry go-containerregistry; it builds binaries by running `go build`, not
// by importing product code.
package images
