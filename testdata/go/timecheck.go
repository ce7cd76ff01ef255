package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A time case is one of
//
//	{"input": "<RFC 3339 text>", "expected": "<Go JSON time text>"}
//	{"unix_ns": <integer>,       "expected": "<Go JSON time text>"}
//
// expected is what time.Time.MarshalJSON writes, without the quotes. Other
// keys (a comment, say) are ignored.
type timeCase struct {
	label    string
	input    *string
	unixNs   *int64
	expected string
}

// parseTimeCases reads time/cases.json. Numbers are decoded as json.Number
// because unix_ns may be negative or beyond 2^53, where float64 loses digits.
func parseTimeCases(data []byte) ([]timeCase, error) {
	var raw []map[string]any
	if err := decodeNumbers(data, &raw); err != nil {
		return nil, fmt.Errorf("cases.json must be a JSON array of objects: %w", err)
	}
	cases := make([]timeCase, 0, len(raw))
	for i, obj := range raw {
		c := timeCase{label: fmt.Sprintf("case %d", i)}
		exp, ok := obj["expected"].(string)
		if !ok {
			return nil, fmt.Errorf("%s: \"expected\" must be a string", c.label)
		}
		c.expected = exp
		in, hasInput := obj["input"]
		ns, hasNs := obj["unix_ns"]
		switch {
		case hasInput && hasNs:
			return nil, fmt.Errorf("%s: has both \"input\" and \"unix_ns\"", c.label)
		case hasInput:
			s, ok := in.(string)
			if !ok {
				return nil, fmt.Errorf("%s: \"input\" must be a string", c.label)
			}
			c.input = &s
			c.label += fmt.Sprintf(" (input %q)", s)
		case hasNs:
			num, ok := ns.(json.Number)
			if !ok {
				return nil, fmt.Errorf("%s: \"unix_ns\" must be a JSON number", c.label)
			}
			v, err := strconv.ParseInt(num.String(), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: \"unix_ns\" must be an int64 integer: %w", c.label, err)
			}
			c.unixNs = &v
			c.label += fmt.Sprintf(" (unix_ns %d)", v)
		default:
			return nil, fmt.Errorf("%s: needs \"input\" or \"unix_ns\"", c.label)
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// goTimeText computes what Go writes for a case: the JSON text of the
// time.Time, quotes stripped.
func goTimeText(c timeCase) (string, error) {
	var t time.Time
	if c.input != nil {
		var err error
		// The parsed time keeps the input's offset; MarshalJSON writes it back
		// as is (it does not convert to UTC).
		t, err = time.Parse(time.RFC3339Nano, *c.input)
		if err != nil {
			return "", err
		}
	} else {
		t = time.Unix(0, *c.unixNs).UTC()
	}
	b, err := encodeJSON(t)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(strings.TrimPrefix(string(b), `"`), `"`), nil
}
