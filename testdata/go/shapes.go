package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// The wire shapes other than the manifest (manifest.go). Field order is the
// JSON key order Go writes; time.Time marshals as RFC3339Nano with trailing
// zeros trimmed.

// Envelope is the per-message context, carried in headers and nested in DLQ
// entries.
type Envelope struct {
	TraceID        string    `json:"trace_id"`
	SpanID         string    `json:"span_id"`
	Traceparent    string    `json:"traceparent"`
	FlowRunID      string    `json:"flow_run_id"`
	FlowID         string    `json:"flow_id"`
	FlowVersion    int64     `json:"flow_version"`
	IdempotencyKey string    `json:"idempotency_key"`
	SourceNodeID   string    `json:"source_node_id"`
	RetryCount     int       `json:"retry_count"`
	EmittedAt      time.Time `json:"emitted_at"`
}

// Heartbeat has no omitempty field.
type Heartbeat struct {
	Service        string    `json:"service"`
	ServiceVersion string    `json:"service_version"`
	ManifestHash   string    `json:"manifest_hash"`
	StartedAt      time.Time `json:"started_at"`
	Now            time.Time `json:"now"`
	ShuttingDown   bool      `json:"shutting_down"`
}

// CompletionEvent is published per executed node; it has no result body.
type CompletionEvent struct {
	FlowRunID   string    `json:"flow_run_id"`
	FlowID      string    `json:"flow_id"`
	FlowVersion int64     `json:"flow_version"`
	NodeID      string    `json:"node_id"`
	NodeType    string    `json:"node_type"`
	Service     string    `json:"service"`
	StartedAt   time.Time `json:"started_at"`
	FinishedAt  time.Time `json:"finished_at"`
	Status      string    `json:"status"`
	Error       string    `json:"error,omitempty"`
	TraceID     string    `json:"trace_id,omitempty"`
}

// DLQEntry nests the full Envelope; Body is the original input, kept as raw
// JSON (Go compacts it but does not otherwise rewrite it).
type DLQEntry struct {
	Kind       string          `json:"kind"`
	Envelope   Envelope        `json:"envelope"`
	Body       json.RawMessage `json:"body"`
	ErrMsg     string          `json:"err_msg"`
	OccurredAt time.Time       `json:"occurred_at"`
}

// FlowEnvelope carries one flow definition; Body is free-form.
type FlowEnvelope struct {
	ID      string         `json:"id"`
	Version int64          `json:"version"`
	Body    map[string]any `json:"body"`
}

// RegisterReply answers manifest.register.
type RegisterReply struct {
	Error string         `json:"error,omitempty"`
	Flows []FlowEnvelope `json:"flows"`
}

// DurableTimerRootContext starts a run of a Durable Timer lineage.
type DurableTimerRootContext struct {
	V               int    `json:"v"`
	Kind            string `json:"kind"`
	FlowID          string `json:"flow_id"`
	FlowVersion     int64  `json:"flow_version"`
	RootExecutionID string `json:"root_execution_id"`
}

// DurableTimerElapsedContext accompanies the delivery after a timer fires.
type DurableTimerElapsedContext struct {
	V               int    `json:"v"`
	Kind            string `json:"kind"`
	FlowID          string `json:"flow_id"`
	FlowVersion     int64  `json:"flow_version"`
	RootExecutionID string `json:"root_execution_id"`
	TimerNodeID     string `json:"timer_node_id"`
	TimerRef        string `json:"timer_ref"`
	Occurrence      int64  `json:"occurrence"`
	Fence           int64  `json:"fence"`
	SnapshotSHA256  string `json:"snapshot_sha256"`
	ResumeEdgeID    string `json:"resume_edge_id"`
	ResumeRunID     string `json:"resume_run_id"`
}

// shapeKinds maps a golden file name prefix to the Go type it holds.
var shapeKinds = map[string]func() any{
	"heartbeat":             func() any { return new(Heartbeat) },
	"completion_event":      func() any { return new(CompletionEvent) },
	"dlq_entry":             func() any { return new(DLQEntry) },
	"register_reply":        func() any { return new(RegisterReply) },
	"flow_envelope":         func() any { return new(FlowEnvelope) },
	"envelope":              func() any { return new(Envelope) },
	"manifest":              func() any { return new(Manifest) },
	"durable_timer_root":    func() any { return new(DurableTimerRootContext) },
	"durable_timer_elapsed": func() any { return new(DurableTimerElapsedContext) },
}

// shapeFor picks the shape named by a file name. The longest matching prefix
// wins, so that a future prefix nested in another cannot be shadowed.
func shapeFor(fileName string) (kind string, newValue func() any, ok bool) {
	base := strings.TrimSuffix(fileName, ".json")
	for prefix, f := range shapeKinds {
		if strings.HasPrefix(base, prefix) && len(prefix) > len(kind) {
			kind, newValue, ok = prefix, f, true
		}
	}
	return kind, newValue, ok
}

// shapeNames lists the known prefixes, for error messages.
func shapeNames() string {
	var names []string
	for k := range shapeKinds {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// roundTrip decodes golden into v and re-encodes it the way Go writes it.
func roundTrip(golden []byte, v any) ([]byte, error) {
	if err := decodeJSON(golden, v); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	got, err := encodeJSON(v)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return got, nil
}

// roundTripHints explains a round-trip mismatch where it can: unknown keys
// (dropped by Go) and the one case the legacy-escape rewriter cannot judge.
func roundTripHints(golden []byte, newValue func() any, decoded any) []string {
	var hints []string
	if err := decodeStrict(golden, newValue()); err != nil {
		hints = append(hints, "strict decode: "+err.Error())
	}
	if e, ok := decoded.(*DLQEntry); ok && mode.legacy && hasLegacyEscape(e.Body) {
		hints = append(hints, `the DLQ body holds a \u0008/\u000c escape: Go >= 1.22 keeps json.RawMessage bytes verbatim, `+
			`but under `+mode.goVersion+` the legacy-escape rewriter also rewrites them; judge this file with Go >= 1.22`)
	}
	return hints
}
