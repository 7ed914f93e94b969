// Command pulumi-resource-lockplane is the Pulumi resource provider plugin
// for the hosts a Lockplane region runs on (package nodes/provider). The
// Pulumi engine starts it; it is not run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/lockplane/lockplane/nodes/provider"
	pprovider "github.com/pulumi/pulumi/sdk/v3/go/pulumi/provider"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
)

func main() {
	err := pprovider.Main(provider.Name, func(*pprovider.HostClient) (pulumirpc.ResourceProviderServer, error) {
		return provider.New(), nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
