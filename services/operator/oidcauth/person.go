package oidcauth

// DifferentPerson refuses (RuleSamePerson) when approver is requester: the
// same subject at the same issuer, OpenID Connect's definition of one
// identity. It refuses (RuleSubject) an Operator with no issuer or subject,
// since then it cannot tell. Names and emails are not compared: they are
// mutable and not unique in general.
//
// It cannot see through one person holding two accounts; that is the
// identity provider's administration to prevent.
func DifferentPerson(requester, approver Operator) error {
	for _, o := range []Operator{requester, approver} {
		if o.Issuer == "" || o.Subject == "" {
			return refuse(RuleSubject, "an operator without issuer or subject cannot be told apart")
		}
	}
	if requester.Issuer == approver.Issuer && requester.Subject == approver.Subject {
		return refuse(RuleSamePerson, "approver is the requester (sub %q at %s)", approver.Subject, approver.Issuer)
	}
	return nil
}
