package main

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// Every --since takes whole days, as the issue and the docs write
// windows (7d); a bad value is refused naming the flag and the rule.
func TestSinceFlagsTakeDays(t *testing.T) {
	g := &globals{}
	for name, c := range map[string]*cobra.Command{"audit": auditCmd(g), "audit expiries": expiriesCmd(g), "report": reportCmd(g)} {
		if err := c.Flags().Parse([]string{"--since", "7d"}); err != nil {
			t.Errorf("%s --since 7d: %v", name, err)
		}
		if got := c.Flags().Lookup("since").Value.String(); got != "7d" {
			t.Errorf("%s --since 7d reads back as %q", name, got)
		}
		err := c.Flags().Parse([]string{"--since", "7x"})
		if err == nil || !strings.Contains(err.Error(), "--since") || !strings.Contains(err.Error(), "whole days") {
			t.Errorf("%s --since 7x: %v; want a refusal naming --since and the rule", name, err)
		}
	}
}

// since reads Go durations and whole days, alone or before a Go duration.
func TestSinceParsesDurationsAndDays(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour, "90m": 90 * time.Minute, "1h30m": 90 * time.Minute,
		"0d": 0, "30s": 30 * time.Second, "2d30m15s": 48*time.Hour + 30*time.Minute + 15*time.Second,
	} {
		var s since
		if err := s.Set(in); err != nil || time.Duration(s) != want {
			t.Errorf("--since %s = %s, %v; want %s", in, time.Duration(s), err, want)
		}
	}
	for _, in := range []string{"7x", "d", "1.5d", "-1d", "-2h", "7d-1h", "7dd", "1d1d", "", "1w", "d7", "99999999999d", "+1d"} {
		var s since
		err := s.Set(in)
		if err == nil || !strings.Contains(err.Error(), "Go duration") || !strings.Contains(err.Error(), "whole days") {
			t.Errorf("--since %q: %v; want a refusal stating the rule", in, err)
		}
	}
	// What is shown is what was given: help prints the default as days.
	s := since(7 * 24 * time.Hour)
	for d, want := range map[since]string{s: "7d", since(36 * time.Hour): "1d12h", since(time.Hour): "1h",
		since(90 * time.Minute): "1h30m", since(10 * time.Minute): "10m", since(25*time.Hour + time.Second): "1d1h0m1s"} {
		if d.String() != want {
			t.Errorf("%d ns shows as %s, want %s", d, d.String(), want)
		}
		var back since
		if err := back.Set(d.String()); err != nil || back != d {
			t.Errorf("%s reads back as %d ns, %v", d.String(), back, err)
		}
	}
}
