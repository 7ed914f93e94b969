package main

// lockctl routes each key's calls through the fan-in tier when its target
// (a profile's endpoint, or --endpoint) is xds:///NAME and the environment
// variable GRPC_XDS_BOOTSTRAP names the client's xDS bootstrap
// (docs/fan-in.md): gRPC's xDS resolver and ring-hash balancer register
// here.
import _ "google.golang.org/grpc/xds"
