package arbiter

// Internals the external tests measure.

// ValidateLimiters is the number of namespaces with a ValidateToken
// limiter of their own.
func ValidateLimiters(a *Arbiter) int {
	a.validations.mu.Lock()
	defer a.validations.mu.Unlock()
	return len(a.validations.by)
}

// MaxNamespaceLabels and MaxLimiters are the caps the tests check.
const (
	MaxNamespaceLabels = maxNamespaceLabels
	MaxLimiters        = maxLimiters
)
