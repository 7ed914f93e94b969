package class

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// A key lives on exactly one cluster, so its tier is decided by the
// registry, never by a request: two holders of one key on two clusters
// would get incomparable tokens, and a fence would admit both. A key below
// a class's prefix is that class's key; every other key is served by the
// classes without prefixes, all of which live on the default class's tier.

// WrongClassError refuses a request that names a class other than its
// key's: Want is the class (or, for keys no prefix covers, one of the
// classes) that serves the key.
type WrongClassError struct {
	Key, Named, Want string
	// Why says which rule the named class breaks.
	Why string
}

func (e *WrongClassError) Error() string {
	return fmt.Sprintf("key %s is served by class %s, not %s: %s; name class %s (or none)", e.Key, e.Want, e.Named, e.Why, e.Want)
}

// ForKey resolves the class of a request for key that names class name
// ("" for none): the key's own class when a class's prefix covers it, else
// the named class, which must then be one without prefixes on the default
// tier. A request naming another class is refused with *WrongClassError;
// an unregistered name with ErrUnknown.
func (s Static) ForKey(key, name string) (Class, error) {
	named, err := s.Lookup(name)
	if err != nil {
		return Class{}, err
	}
	if own, ok := s.owner(key); ok {
		if name != "" && own.Name != named.Name {
			return Class{}, &WrongClassError{Key: key, Named: named.Name, Want: own.Name,
				Why: fmt.Sprintf("class %s serves the prefix %s on tier %s", own.Name, own.coveringPrefix(key), own.Tier)}
		}
		return own, nil
	}
	def := s.defaultClass()
	switch {
	case len(named.Prefixes) > 0:
		return Class{}, &WrongClassError{Key: key, Named: named.Name, Want: def.Name,
			Why: fmt.Sprintf("class %s serves only keys below %s", named.Name, strings.Join(named.Prefixes, ", "))}
	case named.Tier != def.Tier:
		// A registry that passed Check has no such class; a request is
		// still never routed by one.
		return Class{}, &WrongClassError{Key: key, Named: named.Name, Want: def.Name,
			Why: fmt.Sprintf("class %s is on tier %s but declares no prefixes, and keys no prefix covers live on tier %s", named.Name, named.Tier, def.Tier)}
	}
	return named, nil
}

// owner is the class whose prefix covers key most closely, if any.
func (s Static) owner(key string) (Class, bool) {
	var best Class
	depth := -1
	for _, c := range s {
		// Ties only in a registry Check refuses: broken by name, so that
		// one key still gets one answer.
		if d := c.depth(key); d > depth || (d == depth && d >= 0 && c.Name < best.Name) {
			best, depth = c, d
		}
	}
	return best, depth >= 0
}

// depth is the number of segments of c's longest prefix covering key, or
// -1 when none does. As with grants, a prefix covers the keys below it,
// never the key equal to it.
func (c Class) depth(key string) int {
	best := -1
	for _, p := range c.Prefixes {
		p = strings.TrimSuffix(p, "/") + "/"
		if strings.HasPrefix(key, p) && len(key) > len(p) {
			best = max(best, strings.Count(p, "/"))
		}
	}
	return best
}

func (c Class) coveringPrefix(key string) string {
	out, depth := "", -1
	for _, p := range c.Prefixes {
		if d := (Class{Prefixes: []string{p}}).depth(key); d > depth {
			out, depth = p, d
		}
	}
	return out
}

func (s Static) defaultClass() Class {
	if c, ok := s[DefaultName]; ok {
		return c
	}
	return Default
}

// Check refuses a registry in which one key could be reached through
// classes of two tiers: a class without prefixes on another tier than
// the default class's, or one prefix declared by two classes.
func Check(s Static) error {
	def := s.defaultClass()
	if len(def.Prefixes) > 0 {
		return fmt.Errorf("class %s: the default class serves the keys no prefix covers and names no prefixes", def.Name)
	}
	declared := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(s)) {
		c := s[name]
		if len(c.Prefixes) == 0 && c.Tier != def.Tier {
			return fmt.Errorf("class %s: tier %s needs prefixes: a class without prefixes serves every key no prefix covers, which live on the default class's tier (%s)", name, c.Tier, def.Tier)
		}
		for _, p := range c.Prefixes {
			norm := strings.TrimSuffix(p, "/") + "/"
			if other, dup := declared[norm]; dup {
				return fmt.Errorf("class %s: prefix %s is already served by class %s: a key belongs to one class", name, p, other)
			}
			declared[norm] = name
		}
	}
	return nil
}

// Rehomed lists the prefixes whose keys next would serve on another tier
// than cur does: applying next while keys there are held would put one
// key on two clusters (ADR-07: moving keys between tiers is a rehome, not
// an edit). Every point where either registry's answer can change is a
// declared prefix, so a key just below each decides for its range.
func Rehomed(cur, next Static) []string {
	var out []string
	points := map[string]bool{"": true}
	for _, s := range []Static{cur, next} {
		for _, c := range s {
			for _, p := range c.Prefixes {
				points[strings.TrimSuffix(p, "/")+"/"] = true
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(points)) {
		probe := p + "\x00"
		if cur.tierOf(probe) != next.tierOf(probe) {
			if p == "" {
				p = "(keys no prefix covers)"
			}
			out = append(out, p)
		}
	}
	return out
}

func (s Static) tierOf(key string) Tier {
	if c, ok := s.owner(key); ok {
		return c.Tier
	}
	return s.defaultClass().Tier
}
