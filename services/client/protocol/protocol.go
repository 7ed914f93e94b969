// Package protocol holds what clients and servers agree on beyond the
// proto messages: the routing header and the renewal rate.
//
// It imports nothing, so a server that needs one of these (the fan-in's
// route, the audit store's keepalive estimate) does not link the client.
package protocol

// KeyHeader is the request header that carries the lock key of an
// Acquire, Release or Inspect. The fan-in tier (an Envoy route, or gRPC's
// own xDS client) hashes it onto a ring of arbiters, so every waiter for
// a key reaches the same arbiter and queues there in arrival order
// (ADR-14). Without a fan-in tier it is ignored.
const KeyHeader = "x-lock-key"

// RenewalsPerTTL is how many times a client renews its session's lease
// per TTL: every TTL/RenewalsPerTTL, so two renewals can be lost before it
// expires. The audit cost report estimates keepalives from it.
const RenewalsPerTTL = 3
