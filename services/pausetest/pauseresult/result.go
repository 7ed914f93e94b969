// Package pauseresult is the PauseTestResult document: what the pause test
// kit writes and the class registry requires before a class is fenced.
package pauseresult

import "time"

// APIVersion is the PauseTestResult document's apiVersion.
const APIVersion = "lockplane.io/v1alpha1"

// KitVersion is recorded in every result: a result from an older kit may be
// refused when the kit learns a new case.
const KitVersion = "1"

// Validity is how long a passing result stands (ADR-17).
const Validity = 365 * 24 * time.Hour

// Result is a PauseTestResult document, shaped as a Kubernetes custom
// resource so the class registry can require one before a class is
// declared fenced.
type Result struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Metadata   Metadata     `json:"metadata"`
	Spec       ResultSpec   `json:"spec"`
	Status     ResultStatus `json:"status"`
}

// Metadata names a result.
type Metadata struct {
	Name string `json:"name"`
}

// ResultSpec is what was tested.
type ResultSpec struct {
	Class      string       `json:"class"`
	Resource   ResourceSpec `json:"resource"`
	KitVersion string       `json:"kitVersion"`
}

// ResourceSpec identifies the resource; a change of schema version
// invalidates the result.
type ResourceSpec struct {
	Kind          string `json:"kind"`
	Identity      string `json:"identity"`
	SchemaVersion string `json:"schemaVersion"`
}

// ResultStatus is how it went.
type ResultStatus struct {
	// Outcome is Passed or Failed.
	Outcome     string       `json:"outcome"`
	StartedAt   time.Time    `json:"startedAt"`
	CompletedAt time.Time    `json:"completedAt"`
	Expires     time.Time    `json:"expires"`
	Cases       []CaseResult `json:"cases"`
}

// CaseResult is one case of the test.
type CaseResult struct {
	Name    string   `json:"name"`
	Outcome string   `json:"outcome"`
	Detail  string   `json:"detail,omitempty"`
	Steps   []string `json:"steps"`
}

// Outcomes.
const (
	Passed = "Passed"
	Failed = "Failed"
)

// Passed reports whether every case passed.
func (r *Result) Passed() bool { return r.Status.Outcome == Passed }
