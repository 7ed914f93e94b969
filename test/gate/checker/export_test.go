package checker

// ExcuseEveryOverlapOnAForcedKey swaps in a broken force-release rule
// for the overlap check, until restore is called: any overlap on a key
// that was ever force-released is excused, whoever's grants overlap and
// whenever. The tests of the rule must fail with it.
func ExcuseEveryOverlapOnAForcedKey() (restore func()) {
	saved := excuse
	excuse = func(forced []ForcedGrant, key string, _, _ window) bool {
		for _, f := range forced {
			if f.Key == key {
				return true
			}
		}
		return false
	}
	return func() { excuse = saved }
}
