// Package class holds lock classes: the reviewed settings (TTL, tier) that a
// key's grants follow. Callers name a class; they never choose a TTL
// (ADR-11). The class registry of reviewed documents replaces Static later;
// everything that needs a class goes through Registry.
package class

import (
	"fmt"
	"time"
)

// Tier picks the etcd cluster a class's keys live on (ADR-07).
type Tier string

// The tiers.
const (
	TierCoord  Tier = "coord"
	TierEntity Tier = "entity"
)

// Fairness is how a class's waiters are ordered (ADR-14).
type Fairness string

// The fairness options.
const (
	// FairnessMemory queues waiters in the arbiter's memory in arrival
	// order: free, best effort, lost when the arbiter restarts.
	FairnessMemory Fairness = "memory"
	// FairnessDurable queues waiters as etcd keys ordered by create
	// revision: the order survives arbiter restarts, at two consensus
	// writes per waiter.
	FairnessDurable Fairness = "durable"
)

// Class is one lock class.
type Class struct {
	Name string
	// TTL of the sessions holding this class's keys.
	TTL  time.Duration
	Tier Tier
	// Namespace, when set, is the only key namespace the class may lock
	// (classes from the policy set are their namespace's own).
	Namespace string
	// Fairness orders the class's waiters; memory when empty.
	Fairness Fairness
	// Prefixes are the key prefixes the class serves: a key below one of
	// them is the class's key, whatever a request names. A class without
	// prefixes serves the keys no class's prefix covers, and lives on the
	// default class's tier (Check).
	Prefixes []string
}

// Durable reports whether the class's waiters are durable keys.
func (c Class) Durable() bool { return c.Fairness == FairnessDurable }

// DefaultName is the class used when a request names none.
const DefaultName = "default"

// MaxTTL is the platform's longest session TTL (ADR-11): no session lives
// longer than this without a renewal.
const MaxTTL = 300 * time.Second

// Default is the platform's default class: 15 s TTL on the coord tier.
var Default = Class{Name: DefaultName, TTL: 15 * time.Second, Tier: TierCoord}

// Registry resolves class names.
type Registry interface {
	// Lookup resolves name; the empty name is the default class.
	Lookup(name string) (Class, error)
	// ForKey resolves the class a request for key naming name gets: the
	// key's own class, whatever the request names (Static.ForKey).
	ForKey(key, name string) (Class, error)
}

// Static is a fixed set of classes.
type Static map[string]Class

// NewStatic returns a registry of the given classes plus Default.
func NewStatic(cs ...Class) Static {
	s := Static{DefaultName: Default}
	for _, c := range cs {
		s[c.Name] = c
	}
	return s
}

// ErrUnknown reports a class name that is not registered.
type ErrUnknown struct{ Name string }

func (e ErrUnknown) Error() string { return fmt.Sprintf("class %q is not registered", e.Name) }

// Lookup implements Registry.
func (s Static) Lookup(name string) (Class, error) {
	if name == "" {
		name = DefaultName
	}
	c, ok := s[name]
	if !ok {
		return Class{}, ErrUnknown{name}
	}
	return c, nil
}
