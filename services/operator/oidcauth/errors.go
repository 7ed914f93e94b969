package oidcauth

import (
	"errors"
	"fmt"
)

// Rule names the check an ID token failed. Its values are stable: they are
// meant for logs, metrics and API error details.
type Rule string

const (
	// RuleMalformed: not a compact JWS, or its claims are not JSON.
	RuleMalformed Rule = "malformed"
	// RuleIssuer: iss is not the configured issuer.
	RuleIssuer Rule = "issuer"
	// RuleAudience: aud does not contain the configured client ID.
	RuleAudience Rule = "audience"
	// RuleExpired: exp is in the past.
	RuleExpired Rule = "expired"
	// RuleNotYetValid: nbf is in the future.
	RuleNotYetValid Rule = "not_yet_valid"
	// RuleSignature: no key of the issuer's JWKS verifies the signature
	// (or the algorithm is not allowed, or the keys could not be fetched).
	RuleSignature Rule = "signature"
	// RuleSubject: the token has no sub.
	RuleSubject Rule = "subject"
	// RuleRole: the role claim does not list the required role.
	RuleRole Rule = "role"
	// RuleMFA: neither amr shows a second factor nor acr is the required value.
	RuleMFA Rule = "mfa"
	// RuleAuthTime: auth_time is missing, older than the maximum age, or
	// in the future.
	RuleAuthTime Rule = "auth_time"
	// RuleAccount: the account claim is missing or not a single SVID path
	// segment.
	RuleAccount Rule = "account"
	// RuleSamePerson: a requester tried to approve their own request.
	RuleSamePerson Rule = "same_person"
)

// Error is a refusal. It names the rule and, in Detail, what was expected
// and found — never the token itself.
type Error struct {
	Rule   Rule
	Detail string
	// Err is the underlying library error, when there is one. It never
	// holds the raw token (go-oidc's messages quote claims, not tokens).
	Err error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("operator token refused: rule %s", e.Rule)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// RuleOf returns the rule err names, or "" if err is not a refusal.
func RuleOf(err error) Rule {
	var e *Error
	if errors.As(err, &e) {
		return e.Rule
	}
	return ""
}

func refuse(r Rule, format string, args ...any) *Error {
	return &Error{Rule: r, Detail: fmt.Sprintf(format, args...)}
}
