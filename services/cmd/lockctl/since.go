package main

import (
	"errors"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// since is a --since window: a Go duration (90m, 36h) or whole days,
// optionally followed by a Go duration (7d, 1d12h). Audit windows are
// talked about in days (the issue's `report --since 7d`), which
// time.ParseDuration does not read.
type since time.Duration

const day = 24 * time.Hour

// maxDays keeps the window within a time.Duration.
const maxDays = math.MaxInt64 / int64(day)

var daysPrefix = regexp.MustCompile(`^([0-9]+)d(.*)$`)

var errSince = errors.New("must be a Go duration (90m, 36h) or whole days, optionally followed by one (7d, 1d12h); not negative, and at most " +
	strconv.FormatInt(maxDays, 10) + "d")

func (s *since) Set(v string) error {
	var d time.Duration
	if m := daysPrefix.FindStringSubmatch(v); m != nil {
		days, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || days > maxDays {
			return errSince
		}
		d = time.Duration(days) * day
		if m[2] != "" {
			// Only digits may follow the days: "7d-1h" is no window.
			if m[2][0] < '0' || m[2][0] > '9' {
				return errSince
			}
			rest, err := time.ParseDuration(m[2])
			if err != nil || rest > time.Duration(math.MaxInt64)-d {
				return errSince
			}
			d += rest
		}
	} else {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d < 0 {
			return errSince
		}
	}
	*s = since(d)
	return nil
}

// String shows whole days as days, so help prints the defaults as the
// docs write them (1d, 7d).
func (s since) String() string {
	d := time.Duration(s)
	switch {
	case d >= day && d%day == 0:
		return strconv.FormatInt(int64(d/day), 10) + "d"
	case d > day:
		return strconv.FormatInt(int64(d/day), 10) + "d" + short(d%day)
	}
	return short(d)
}

// short is d.String() without zero minutes and seconds after a larger
// unit: 1h rather than 1h0m0s.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

func (s *since) Type() string { return "duration" }

// ago is the start of the window.
func (s since) ago() time.Time { return time.Now().Add(-time.Duration(s)) }
