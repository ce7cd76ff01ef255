package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// headersFile is one headers/*.json golden: the headers a message carries
// and the envelope they encode.
type headersFile struct {
	Headers  [][]string      `json:"headers"`
	Envelope json.RawMessage `json:"envelope"`
}

// envelopeHeader maps a canonical X-Triggers-* header name to the text its
// value must have for a given envelope. Integers are decimal, emitted_at is
// Go's RFC3339Nano text (the same text as the JSON time, without quotes).
var envelopeHeader = map[string]func(e *Envelope) string{
	"X-Triggers-Trace-Id":        func(e *Envelope) string { return e.TraceID },
	"X-Triggers-Span-Id":         func(e *Envelope) string { return e.SpanID },
	"X-Triggers-Traceparent":     func(e *Envelope) string { return e.Traceparent },
	"X-Triggers-Flow-Run-Id":     func(e *Envelope) string { return e.FlowRunID },
	"X-Triggers-Flow-Id":         func(e *Envelope) string { return e.FlowID },
	"X-Triggers-Flow-Version":    func(e *Envelope) string { return strconv.FormatInt(e.FlowVersion, 10) },
	"X-Triggers-Idempotency-Key": func(e *Envelope) string { return e.IdempotencyKey },
	"X-Triggers-Source-Node-Id":  func(e *Envelope) string { return e.SourceNodeID },
	"X-Triggers-Retry-Count":     func(e *Envelope) string { return strconv.Itoa(e.RetryCount) },
	"X-Triggers-Emitted-At":      func(e *Envelope) string { return e.EmittedAt.Format(time.RFC3339Nano) },
}

// checkHeaderValues compares every envelope header present (names matched
// ignoring ASCII case, as readers do) with the envelope, and Nats-Msg-Id
// with the idempotency key. Other headers are not judged. It returns one message per problem.
func checkHeaderValues(headers [][]string, env *Envelope) []string {
	var problems []string
	for i, h := range headers {
		if len(h) != 2 {
			problems = append(problems, fmt.Sprintf("headers[%d] is not a [name, value] pair", i))
			continue
		}
		name, value := h[0], h[1]
		if strings.EqualFold(name, "Nats-Msg-Id") {
			if !validMsgID(value, env.IdempotencyKey) {
				problems = append(problems, fmt.Sprintf("%s = %q, want %q or %q",
					name, value, env.IdempotencyKey, env.IdempotencyKey+":dlq:<unix_ns>"))
			}
			continue
		}
		for canonical, want := range envelopeHeader {
			if !strings.EqualFold(name, canonical) {
				continue
			}
			if w := want(env); value != w {
				problems = append(problems, fmt.Sprintf("%s = %q, want %q", name, value, w))
			}
		}
	}
	return problems
}

// validMsgID accepts the JetStream dedup id: the idempotency key, or for DLQ
// publishes "<idempotency_key>:dlq:<unix_ns>".
func validMsgID(value, key string) bool {
	if value == key {
		return true
	}
	ns := strings.TrimPrefix(value, key+":dlq:")
	if ns == value || ns == "" {
		return false
	}
	_, err := strconv.ParseUint(ns, 10, 64)
	return err == nil
}
