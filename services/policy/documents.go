// Package policy is the class registry's source: LockClass and LockGrant
// documents, reviewed files shaped like Kubernetes custom resources
// (ADR-24), and the one library that validates them. lockctl policy
// check, the infrastructure program and the arbiter all load a directory
// through Load, so a set that passes review is exactly the set that
// serves, and an invalid set is refused everywhere with the file, the
// document, the field and the rule named.
package policy

import (
	"time"

	"github.com/lockplane/lockplane/services/class"
)

// APIVersion is the documents' apiVersion.
const APIVersion = "lockplane.io/v1"

// The document kinds.
const (
	KindClass     = "LockClass"
	KindGrant     = "LockGrant"
	KindPauseTest = "PauseTestResult"
	KindNamespace = "LockNamespace"
)

// Metadata names a document.
type Metadata struct {
	Name string `json:"name"`
}

// LockClass is a reviewed lock class.
type LockClass struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Metadata   Metadata  `json:"metadata"`
	Spec       ClassSpec `json:"spec"`
}

// ClassSpec is what a class decides (ADR-01, 04, 07, 11, 14).
type ClassSpec struct {
	// Namespace is the tenant namespace whose keys the class locks.
	Namespace string `json:"namespace"`
	// Purpose is correctness (two holders cause damage) or efficiency (two
	// holders waste work).
	Purpose string `json:"purpose"`
	// Enforcement is fenced (the resource refuses stale tokens, proven by
	// a pause test) or advisory.
	Enforcement string `json:"enforcement"`
	// RiskOwner and WaiverExpires are required of an advisory correctness
	// class: who accepts the risk, until when.
	RiskOwner     string `json:"riskOwner,omitempty"`
	WaiverExpires string `json:"waiverExpires,omitempty"`
	// TTL of the class's sessions: 5 s to 300 s, 15 s by default, at least
	// 30 s when advisory.
	TTL string `json:"ttl,omitempty"`
	// Tier is coord or entity.
	Tier string `json:"tier"`
	// Prefixes are the key prefixes whose keys are this class's, whatever
	// a request names: a key lives on one tier, decided here. A class on
	// another tier than the default class's (coord) must declare them.
	Prefixes []string `json:"prefixes,omitempty"`
	// Fairness is memory (arrival order in the arbiter, best effort) or
	// durable (waiter keys in etcd).
	Fairness string `json:"fairness,omitempty"`
	// OnQuorumLoss is closed, or open for efficiency classes only.
	OnQuorumLoss string `json:"onQuorumLoss,omitempty"`
	// PauseTestResult names the PauseTestResult document that proves the
	// fence; required when fenced.
	PauseTestResult string `json:"pauseTestResult,omitempty"`
}

// LockGrant lets one SPIFFE identity lock keys under prefixes.
type LockGrant struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Metadata   Metadata  `json:"metadata"`
	Spec       GrantSpec `json:"spec"`
}

// GrantSpec is an identity, its prefixes and its quota.
type GrantSpec struct {
	SPIFFEID string   `json:"spiffeId"`
	Prefixes []string `json:"prefixes"`
	// Quota limits the identity's live sessions and holds; DefaultQuota
	// when absent. Set it on at most one grant of an identity.
	Quota *Quota `json:"quota,omitempty"`
	// Workload is how SPIRE recognises the identity's workloads: the
	// registration entries `lockplane up` keeps on the region's SPIRE
	// server, so a grant and who gets its identity are reviewed together.
	// Set it on at most one grant of an identity.
	Workload *Workload `json:"workload,omitempty"`
}

// Workload is the registration of a granted identity: SPIRE issues its
// SVID to a process, on any of the region's workload hosts, that matches
// every selector.
type Workload struct {
	// Selectors are SPIRE workload selectors, "type:value" as
	// spire-server entry create takes them ("unix:user:ledger",
	// "unix:path:/usr/bin/ledger", "k8s:sa:ledger-writer").
	Selectors []string `json:"selectors"`
	// AllowRoot accepts selectors that match by the root user or group
	// alone, which every root process on the workload hosts matches: for
	// test hosts, where everything runs as root.
	AllowRoot bool `json:"allowRoot,omitempty"`
}

// Quota is an identity's limits, enforced by the arbiter.
type Quota struct {
	Sessions int `json:"sessions"`
	Holds    int `json:"holds"`
}

// DefaultQuota is the quota of an identity none of whose grants sets one:
// generous for a service, fatal to a leak that opens a session per request.
var DefaultQuota = Quota{Sessions: 64, Holds: 4096}

// LockNamespace homes a tenant namespace to a region (ADR-08): arbiters of
// other regions refuse its keys with a redirect naming the region.
type LockNamespace struct {
	APIVersion string        `json:"apiVersion"`
	Kind       string        `json:"kind"`
	Metadata   Metadata      `json:"metadata"`
	Spec       NamespaceSpec `json:"spec"`
}

// NamespaceSpec says where a namespace lives and who owns it. At least
// one of the two is set.
type NamespaceSpec struct {
	// Region is the region whose arbiters serve the namespace's keys;
	// empty: every region's.
	Region string `json:"region,omitempty"`
	// Owner is the team told when the namespace's holders misbehave
	// (expiries without release, a stalled queue): the monitoring host's
	// Alertmanager routes those alerts to its webhook. A namespace without
	// one routes them to the platform's receiver.
	Owner *Owner `json:"owner,omitempty"`
}

// Owner is a team and where its alerts go.
type Owner struct {
	// Team names the team's receiver: a DNS label such as payments-sre.
	Team string `json:"team"`
	// Webhook is the http or https URL Alertmanager posts the team's
	// alerts to (Alertmanager's webhook format).
	Webhook string `json:"webhook"`
}

// The enumerations.
const (
	PurposeCorrectness = "correctness"
	PurposeEfficiency  = "efficiency"
	EnforcementFenced  = "fenced"
	EnforcementAdvisor = "advisory"
	FairnessMemory     = string(class.FairnessMemory)
	FairnessDurable    = string(class.FairnessDurable)
	QuorumLossClosed   = "closed"
	QuorumLossOpen     = "open"
)

// The platform's TTL range (ADR-11).
const (
	MinTTL        = 5 * time.Second
	MaxTTL        = class.MaxTTL
	DefaultTTL    = 15 * time.Second
	AdvisoryFloor = 30 * time.Second
)
