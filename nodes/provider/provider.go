// Package provider is the Pulumi resource provider for hosts the operator
// owns, reached over SSH: files, services, a private CA and certificates,
// Tang servers, LUKS volumes bound to Tang, the fsync benchmark and etcd
// cluster readiness. Every resource is idempotent: Diff compares inputs, so
// a second `up` with nothing changed touches nothing, and a change of one
// input touches only the resource that has it.
package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/lockplane/lockplane/nodes/remote"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/plugin"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// Name is the provider's package name: resource types are
// lockplane:nodes:<Kind>, served by the plugin pulumi-resource-lockplane.
const Name = "lockplane"

// Version is the provider's version.
const Version = "0.1.0"

// Env is what resource operations share: the SSH connections.
type Env struct {
	Pool *remote.Pool
}

// kind is one resource type, over its decoded inputs.
type kind interface {
	// validate checks decoded inputs; known is false when some are unknown
	// (a preview), and only the known ones can be checked.
	validate(in any) error
	newInputs() any
	create(ctx context.Context, env *Env, in any) (id string, out map[string]any, err error)
	// read returns nil outputs when the resource is gone.
	read(ctx context.Context, env *Env, id string, in any, state map[string]any) (map[string]any, error)
	update(ctx context.Context, env *Env, id string, olds, news any, state map[string]any) (map[string]any, error)
	delete(ctx context.Context, env *Env, id string, in any, state map[string]any) error
	// replaces lists the inputs whose change replaces the resource; every
	// other change is an update.
	replaces() []string
	// secrets lists the outputs to store encrypted.
	secrets() []string
}

var kinds = map[string]kind{}

func register(name string, k kind) { kinds[Name+":nodes:"+name] = k }

// Server implements pulumirpc.ResourceProviderServer.
type Server struct {
	pulumirpc.UnimplementedResourceProviderServer
	env *Env
}

// New returns a provider.
func New() *Server { return &Server{env: &Env{Pool: &remote.Pool{}}} }

func kindOf(urn string) (kind, string, error) {
	t := resource.URN(urn).Type().String()
	k, ok := kinds[t]
	if !ok {
		return nil, t, status.Errorf(codes.InvalidArgument, "lockplane provider: unknown resource type %q", t)
	}
	return k, t, nil
}

func unmarshal(s *structpb.Struct, keepSecrets bool) (resource.PropertyMap, error) {
	return plugin.UnmarshalProperties(s, plugin.MarshalOptions{KeepUnknowns: true, SkipNulls: true, KeepSecrets: keepSecrets})
}

func marshal(m resource.PropertyMap) (*structpb.Struct, error) {
	return plugin.MarshalProperties(m, plugin.MarshalOptions{KeepUnknowns: true, SkipNulls: true, KeepSecrets: true})
}

// decode turns plain (secret-free) properties into a kind's input struct,
// ignoring unknown values. Inputs must have only the kind's fields; a
// resource's state also has its outputs.
func decode(k kind, pm resource.PropertyMap, strict bool) (any, error) {
	known := resource.PropertyMap{}
	for key, v := range pm {
		if !v.ContainsUnknowns() {
			known[key] = v
		}
	}
	in := k.newInputs()
	b, err := json.Marshal(known.Mappable())
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(in); err != nil {
		return nil, fmt.Errorf("inputs: %v", err)
	}
	return in, nil
}

func inputsOf(k kind, s *structpb.Struct) (any, resource.PropertyMap, error) {
	plain, err := unmarshal(s, false)
	if err != nil {
		return nil, nil, err
	}
	in, err := decode(k, plain, true)
	return in, plain, err
}

// stateInputs decodes a resource's inputs from its old inputs, or from its
// state when the engine sent none.
func stateInputs(k kind, oldInputs, state *structpb.Struct) (any, error) {
	if oldInputs != nil {
		in, _, err := inputsOf(k, oldInputs)
		return in, err
	}
	plain, err := unmarshal(state, false)
	if err != nil {
		return nil, err
	}
	return decode(k, plain, false)
}

// GetPluginInfo implements pulumirpc.ResourceProviderServer.
func (s *Server) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: Version}, nil
}

// GetSchema implements pulumirpc.ResourceProviderServer: a minimal schema;
// programs use the typed Go resources in infra/nodes.
func (s *Server) GetSchema(context.Context, *pulumirpc.GetSchemaRequest) (*pulumirpc.GetSchemaResponse, error) {
	return &pulumirpc.GetSchemaResponse{Schema: fmt.Sprintf(`{"name":%q,"version":%q}`, Name, Version)}, nil
}

// CheckConfig implements pulumirpc.ResourceProviderServer: the provider has
// no configuration of its own.
func (s *Server) CheckConfig(_ context.Context, req *pulumirpc.CheckRequest) (*pulumirpc.CheckResponse, error) {
	return &pulumirpc.CheckResponse{Inputs: req.GetNews()}, nil
}

// DiffConfig implements pulumirpc.ResourceProviderServer.
func (s *Server) DiffConfig(context.Context, *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	return &pulumirpc.DiffResponse{Changes: pulumirpc.DiffResponse_DIFF_NONE}, nil
}

// Configure implements pulumirpc.ResourceProviderServer.
func (s *Server) Configure(context.Context, *pulumirpc.ConfigureRequest) (*pulumirpc.ConfigureResponse, error) {
	return &pulumirpc.ConfigureResponse{AcceptSecrets: true, SupportsPreview: false}, nil
}

// Check implements pulumirpc.ResourceProviderServer: inputs are validated
// before anything happens, with the field and the rule named.
func (s *Server) Check(_ context.Context, req *pulumirpc.CheckRequest) (*pulumirpc.CheckResponse, error) {
	k, _, err := kindOf(req.GetUrn())
	if err != nil {
		return nil, err
	}
	in, plain, err := inputsOf(k, req.GetNews())
	if err == nil && !plain.ContainsUnknowns() {
		// With unknowns (a preview of values not made yet) the inputs are
		// checked again in Create and Update, once they are all known.
		err = k.validate(in)
	}
	if err != nil {
		return &pulumirpc.CheckResponse{Inputs: req.GetNews(), Failures: []*pulumirpc.CheckFailure{{Reason: err.Error()}}}, nil
	}
	return &pulumirpc.CheckResponse{Inputs: req.GetNews()}, nil
}

// Diff implements pulumirpc.ResourceProviderServer: a change of any input
// in replaces() replaces; any other changed input updates.
func (s *Server) Diff(_ context.Context, req *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	k, _, err := kindOf(req.GetUrn())
	if err != nil {
		return nil, err
	}
	olds := req.GetOldInputs()
	if olds == nil {
		olds = req.GetOlds()
	}
	o, err := unmarshal(olds, false)
	if err != nil {
		return nil, err
	}
	n, err := unmarshal(req.GetNews(), false)
	if err != nil {
		return nil, err
	}
	changed := map[string]bool{}
	for key, nv := range n {
		if ov, ok := o[key]; !ok || nv.ContainsUnknowns() || !ov.DeepEquals(nv) {
			changed[string(key)] = true
		}
	}
	for key := range o {
		if _, ok := n[key]; !ok && isInput(k, string(key)) {
			changed[string(key)] = true
		}
	}
	resp := &pulumirpc.DiffResponse{Changes: pulumirpc.DiffResponse_DIFF_NONE}
	for key := range changed {
		resp.Diffs = append(resp.Diffs, key)
		if contains(k.replaces(), key) {
			resp.Replaces = append(resp.Replaces, key)
		}
	}
	sort.Strings(resp.Diffs)
	sort.Strings(resp.Replaces)
	if len(resp.Diffs) > 0 {
		resp.Changes = pulumirpc.DiffResponse_DIFF_SOME
		// A host-bound resource cannot coexist with its replacement (one
		// path, one unit name): delete first.
		resp.DeleteBeforeReplace = len(resp.Replaces) > 0
	}
	return resp, nil
}

// isInput reports whether key is an input field of k.
func isInput(k kind, key string) bool { return fieldsOf(k.newInputs())[key] }

// fieldsOf is the set of JSON names of a pointer to struct's fields,
// those of embedded structs included, as encoding/json sees them.
func fieldsOf(p any) map[string]bool {
	out := map[string]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
				walk(f.Type)
				continue
			}
			out[name] = true
		}
	}
	walk(reflect.TypeOf(p).Elem())
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// state merges the inputs (secrets kept) with the outputs, marking the
// kind's secret outputs.
func state(k kind, inputs *structpb.Struct, out map[string]any) (*structpb.Struct, error) {
	in, err := unmarshal(inputs, true)
	if err != nil {
		return nil, err
	}
	props := resource.NewPropertyMapFromMap(out)
	for key, v := range in {
		if _, ok := props[key]; !ok {
			props[key] = v
		}
	}
	for _, key := range k.secrets() {
		if v, ok := props[resource.PropertyKey(key)]; ok && !v.IsSecret() {
			props[resource.PropertyKey(key)] = resource.MakeSecret(v)
		}
	}
	// An SSH key is a secret in the state whether or not the program said
	// so, nested ones too (a ShardRestore's members): an update's outputs
	// are the old state, read without its secrets.
	return marshal(sshKeysSecret(resource.NewObjectProperty(props)).ObjectValue())
}

// sshKeysSecret marks the privateKey of every connection object in v,
// at any depth, secret.
func sshKeysSecret(v resource.PropertyValue) resource.PropertyValue {
	switch {
	case v.IsArray():
		out := make([]resource.PropertyValue, len(v.ArrayValue()))
		for i, e := range v.ArrayValue() {
			out[i] = sshKeysSecret(e)
		}
		return resource.NewArrayProperty(out)
	case v.IsObject():
		out := resource.PropertyMap{}
		for k, e := range v.ObjectValue() {
			out[k] = sshKeysSecret(e)
			if c := out[k]; k == "connection" && c.IsObject() {
				if key, ok := c.ObjectValue()["privateKey"]; ok && !key.IsSecret() {
					conn := c.ObjectValue().Copy()
					conn["privateKey"] = resource.MakeSecret(key)
					out[k] = resource.NewObjectProperty(conn)
				}
			}
		}
		return resource.NewObjectProperty(out)
	}
	return v
}

// Create implements pulumirpc.ResourceProviderServer.
func (s *Server) Create(ctx context.Context, req *pulumirpc.CreateRequest) (*pulumirpc.CreateResponse, error) {
	k, _, err := kindOf(req.GetUrn())
	if err != nil {
		return nil, err
	}
	in, _, err := inputsOf(k, req.GetProperties())
	if err != nil {
		return nil, err
	}
	if err := k.validate(in); err != nil {
		return nil, err
	}
	id, out, err := k.create(ctx, s.env, in)
	if err != nil {
		return nil, err
	}
	st, err := state(k, req.GetProperties(), out)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.CreateResponse{Id: id, Properties: st}, nil
}

// Read implements pulumirpc.ResourceProviderServer (refresh): a resource
// found gone is reported gone, so the next `up` makes it again.
func (s *Server) Read(ctx context.Context, req *pulumirpc.ReadRequest) (*pulumirpc.ReadResponse, error) {
	k, _, err := kindOf(req.GetUrn())
	if err != nil {
		return nil, err
	}
	in, err := stateInputs(k, req.GetInputs(), req.GetProperties())
	if err != nil {
		return nil, err
	}
	inputs := req.GetInputs()
	old, err := unmarshal(req.GetProperties(), false)
	if err != nil {
		return nil, err
	}
	out, err := k.read(ctx, s.env, req.GetId(), in, old.Mappable())
	if err != nil {
		return nil, err
	}
	if out == nil {
		return &pulumirpc.ReadResponse{}, nil
	}
	if inputs == nil {
		inputs = req.GetProperties()
	}
	st, err := state(k, inputs, out)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.ReadResponse{Id: req.GetId(), Properties: st, Inputs: req.GetInputs()}, nil
}

// Update implements pulumirpc.ResourceProviderServer.
func (s *Server) Update(ctx context.Context, req *pulumirpc.UpdateRequest) (*pulumirpc.UpdateResponse, error) {
	k, _, err := kindOf(req.GetUrn())
	if err != nil {
		return nil, err
	}
	olds, err := stateInputs(k, req.GetOldInputs(), req.GetOlds())
	if err != nil {
		return nil, err
	}
	news, _, err := inputsOf(k, req.GetNews())
	if err != nil {
		return nil, err
	}
	if err := k.validate(news); err != nil {
		return nil, err
	}
	old, err := unmarshal(req.GetOlds(), false)
	if err != nil {
		return nil, err
	}
	out, err := k.update(ctx, s.env, req.GetId(), olds, news, old.Mappable())
	if err != nil {
		return nil, err
	}
	st, err := state(k, req.GetNews(), out)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.UpdateResponse{Properties: st}, nil
}

// Delete implements pulumirpc.ResourceProviderServer.
func (s *Server) Delete(ctx context.Context, req *pulumirpc.DeleteRequest) (*emptypb.Empty, error) {
	k, _, err := kindOf(req.GetUrn())
	if err != nil {
		return nil, err
	}
	in, err := stateInputs(k, req.GetOldInputs(), req.GetProperties())
	if err != nil {
		return nil, err
	}
	old, err := unmarshal(req.GetProperties(), false)
	if err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, k.delete(ctx, s.env, req.GetId(), in, old.Mappable())
}

// Cancel implements pulumirpc.ResourceProviderServer.
func (s *Server) Cancel(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	s.env.Pool.Close()
	return &emptypb.Empty{}, nil
}
