package chstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// maxErrorLen bounds how much of ClickHouse's error text an error carries.
const maxErrorLen = 512

// Error is ClickHouse refusing a request: its HTTP status and message.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("clickhouse: HTTP %d: %s", e.Status, e.Message) }

// do sends one statement: in the URL when body carries its data, else as
// the body. row is called while the response has more JSON values to
// decode; it is nil for statements without results.
func (s *Store) do(ctx context.Context, query string, body io.Reader, row func(dec *json.Decoder) error) error {
	params := url.Values{}
	if s.database != "" {
		params.Set("database", s.database)
	}
	// Errors after the first rows would otherwise arrive with status 200.
	params.Set("wait_end_of_query", "1")
	params.Set("output_format_json_quote_64bit_integers", "0")
	if d, ok := ctx.Deadline(); ok {
		// The server stops work the client has given up on.
		// (0 would mean no limit.)
		params.Set("max_execution_time", fmt.Sprint(max(1, int(math.Ceil(time.Until(d).Seconds())))))
	}
	if body != nil {
		params.Set("query", query)
	} else {
		body = strings.NewReader(query)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/?"+params.Encode(), body)
	if err != nil {
		return err
	}
	if s.user != "" {
		req.SetBasicAuth(s.user, s.password)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorLen+1))
		if len(msg) > maxErrorLen {
			msg = append(msg[:maxErrorLen], "…"...)
		}
		return &Error{Status: resp.StatusCode, Message: strings.TrimSpace(string(msg))}
	}
	if row == nil {
		return nil
	}
	dec := json.NewDecoder(resp.Body)
	for dec.More() {
		if err := row(dec); err != nil {
			return fmt.Errorf("clickhouse: decoding a row: %w", err)
		}
	}
	return nil
}

// exec runs a statement that returns nothing.
func (s *Store) exec(ctx context.Context, query string) error { return s.do(ctx, query, nil, nil) }

// query runs a SELECT ... FORMAT JSONEachRow and decodes each row as a T.
func query[T any](ctx context.Context, s *Store, q string) ([]T, error) {
	var out []T
	err := s.do(ctx, q+" FORMAT JSONEachRow", nil, func(dec *json.Decoder) error {
		var v T
		if err := dec.Decode(&v); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

// post runs INSERT ... with data as its body.
func (s *Store) post(ctx context.Context, insert string, data []byte) error {
	return s.do(ctx, insert, bytes.NewReader(data), nil)
}
