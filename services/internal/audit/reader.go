package audit

import (
	"context"
	"time"
)

// Reader answers the questions operators ask of the history: who held a
// key and how each hold ended; what an identity, or a namespace and class,
// did; which holds ended by expiry. Every answer is oldest first and at
// most limit long.
type Reader interface {
	ByKey(ctx context.Context, key string, since time.Time, limit int) ([]Event, error)
	ByIdentity(ctx context.Context, identity string, since time.Time, limit int) ([]Event, error)
	// ByNamespaceClass takes an empty class as every class of ns.
	ByNamespaceClass(ctx context.Context, ns, class string, since time.Time, limit int) ([]Event, error)
	ExpiriesList(ctx context.Context, since time.Time, limit int) ([]Event, error)
	// Expiries counts holds ended by expiry per namespace and class.
	Expiries(ctx context.Context, since time.Time) ([]ExpiryCount, error)
}

// ExpiryCount is how many holds of a namespace and class ended by expiry:
// holders that stopped renewing without releasing (ADR-22).
type ExpiryCount struct {
	Namespace string `json:"namespace"`
	Class     string `json:"class"`
	Count     int64  `json:"count"`
}
