package fanin

import (
	"encoding/json"
	"errors"
)

// ClientTLS are the files a gRPC client presents to the control plane
// and checks it with: its SVID, and the trust bundle. gRPC reads them
// again every refreshInterval, so a rotated SVID is picked up well within
// the life of the one before it.
type ClientTLS struct {
	Cert, Key, Bundle string
}

// refreshInterval is how often gRPC reads the files again (its default is
// ten minutes).
const refreshInterval = "60s"

// ClientBootstrap is the gRPC xDS bootstrap (gRFC A27) of a client that
// routes through the control plane at server (host:port, the host as its
// certificate names it). Point GRPC_XDS_BOOTSTRAP at it and dial
// xds:///NAME with the program importing google.golang.org/grpc/xds.
func ClientBootstrap(server, node string, tls ClientTLS) ([]byte, error) {
	if server == "" || node == "" {
		return nil, errors.New("fanin: a bootstrap needs the server and a node ID")
	}
	if tls.Cert == "" || tls.Key == "" || tls.Bundle == "" {
		return nil, errors.New("fanin: a bootstrap needs the SVID certificate, key and trust bundle: the control plane is mTLS only")
	}
	type creds struct {
		Type   string            `json:"type"`
		Config map[string]string `json:"config"`
	}
	return json.MarshalIndent(map[string]any{
		"xds_servers": []map[string]any{{
			"server_uri": server,
			"channel_creds": []creds{{Type: "tls", Config: map[string]string{
				"certificate_file": tls.Cert, "private_key_file": tls.Key, "ca_certificate_file": tls.Bundle,
				"refresh_interval": refreshInterval,
			}}},
			"server_features": []string{"xds_v3"},
		}},
		"node": map[string]any{"id": node},
	}, "", "  ")
}
