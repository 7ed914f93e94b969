package oidcauth

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// unverified are the claims classify reads from a token go-oidc refused.
type unverified struct {
	Issuer    string          `json:"iss"`
	Audience  json.RawMessage `json:"aud"`
	NotBefore *float64        `json:"nbf"`
}

// classify names the rule go-oidc's refusal broke. The refusal stands
// whatever the label; the unverified claims only choose the label.
func (v *Verifier) classify(raw string, err error) *Error {
	var expired *oidc.TokenExpiredError
	if errors.As(err, &expired) {
		return &Error{Rule: RuleExpired, Err: err,
			Detail: fmt.Sprintf("claim exp %s is before now %s",
				expired.Expiry.UTC().Format(time.RFC3339), v.cfg.Now().UTC().Format(time.RFC3339))}
	}
	parts := strings.Split(raw, ".")
	payload, derr := base64.RawURLEncoding.DecodeString(parts[1])
	var u unverified
	if derr != nil || json.Unmarshal(payload, &u) != nil {
		return &Error{Rule: RuleMalformed, Detail: "payload is not base64url JSON", Err: err}
	}
	if u.Issuer != v.cfg.Issuer {
		return &Error{Rule: RuleIssuer, Err: err,
			Detail: fmt.Sprintf("claim iss is %q, want %q", u.Issuer, v.cfg.Issuer)}
	}
	var aud []string
	if json.Unmarshal(u.Audience, &aud) != nil {
		var one string
		if json.Unmarshal(u.Audience, &one) == nil {
			aud = []string{one}
		}
	}
	if !slices.Contains(aud, v.cfg.ClientID) {
		return &Error{Rule: RuleAudience, Err: err,
			Detail: fmt.Sprintf("claim aud %q does not hold %q", aud, v.cfg.ClientID)}
	}
	if u.NotBefore != nil && time.Unix(int64(*u.NotBefore), 0).After(v.cfg.Now()) {
		return &Error{Rule: RuleNotYetValid, Err: err, Detail: "claim nbf is in the future"}
	}
	// go-oidc's messages here name the failure (parse, algorithm, key
	// fetch, verification), never the token, so the detail carries them.
	if strings.Contains(err.Error(), "malformed jwt") || strings.Contains(err.Error(), "unmarshal claims") {
		return &Error{Rule: RuleMalformed, Err: err, Detail: "not a valid JWS: " + err.Error()}
	}
	return &Error{Rule: RuleSignature, Err: err,
		Detail: "not verified with the issuer's keys: " + err.Error()}
}

// stringsAt reads a list of strings at a dotted claim path. A missing claim
// is an empty list; a claim of another type is an error.
func stringsAt(all map[string]any, path string) ([]string, error) {
	var cur any = all
	for _, seg := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, errors.New("is not an object")
		}
		if cur, ok = m[seg]; !ok {
			return nil, nil
		}
	}
	list, ok := cur.([]any)
	if !ok {
		if s, isStr := cur.(string); isStr { // a single role as a string
			return []string{s}, nil
		}
		return nil, errors.New("is not a list of strings")
	}
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, ok := x.(string)
		if !ok {
			return nil, errors.New("is not a list of strings")
		}
		out = append(out, s)
	}
	return out, nil
}
