package main

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
)

// Manifest is the registration payload as sent on the wire. Field order is
// the JSON key order Go writes. Decoding accepts any key order and, as Go
// does, ignores unknown keys.
type Manifest struct {
	ProtocolVersion string `json:"protocol_version"`
	Service         string `json:"service"`
	ServiceVersion  string `json:"service_version"`
	ManifestHash    string `json:"manifest_hash"`

	Actions             []Action        `json:"actions"`
	ServiceSources      []ServiceSource `json:"service_sources"`
	SupportsNodes       []string        `json:"supports_nodes"`
	SupportsRateLimit   bool            `json:"supports_rate_limit,omitempty"`
	RuntimeCapabilities []string        `json:"runtime_capabilities,omitempty"`
	RuntimeLookups      []Lookup        `json:"runtime_lookups,omitempty"`

	// Top-level catalog fields, after the locked ones (as the spec lists them): never hashed.
	DisplayName string   `json:"display_name,omitempty"`
	Description string   `json:"description,omitempty"`
	Owner       string   `json:"owner,omitempty"`
	Tags        []string `json:"tags,omitempty"`
}

// Action is one manifest action, catalog fields included.
type Action struct {
	Name          string         `json:"name"`
	DisplayName   string         `json:"display_name,omitempty"`
	Description   string         `json:"description,omitempty"`
	Version       string         `json:"version,omitempty"`
	Lifecycle     string         `json:"lifecycle,omitempty"`
	InputSchema   map[string]any `json:"input_schema"`
	ResultSchema  map[string]any `json:"result_schema"`
	TimeoutMs     int            `json:"timeout_ms"`
	Retry         Retry          `json:"retry"`
	DLQ           string         `json:"dlq"`
	ActionEnv     any            `json:"action_env,omitempty"`
	ResultEvent   map[string]any `json:"result_event,omitempty"`
	Compatibility any            `json:"compatibility,omitempty"`
}

// Retry is a value inside Action (not a pointer), so it is always written.
type Retry struct {
	MaxAttempts      int     `json:"max_attempts"`
	InitialBackoffMs int     `json:"initial_backoff_ms"`
	BackoffFactor    float64 `json:"backoff_factor"`
	MaxBackoffMs     int     `json:"max_backoff_ms"`
}

// ServiceSource is one inbound source; it is hashed as is.
type ServiceSource struct {
	Name      string `json:"name"`
	Transport string `json:"transport"`
	Default   string `json:"default"`
}

// Lookup is a read the engine may issue to the service.
type Lookup struct {
	Name         string       `json:"name"`
	DisplayName  string       `json:"display_name,omitempty"`
	Description  string       `json:"description,omitempty"`
	Params       []InputField `json:"params"`
	ResultFields []InputField `json:"result_fields"`
}

// InputField is a lookup parameter or result field.
type InputField struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Required bool   `json:"required,omitempty"`
}

// hashInput is the hashed subset of a manifest. Slices are nil when empty so
// that they encode as null, as the Go reference's nil slices do.
type hashInput struct {
	Actions             []hashAction    `json:"actions"`
	ServiceSources      []ServiceSource `json:"service_sources"`
	SupportsNodes       []string        `json:"supports_nodes"`
	SupportsRateLimit   bool            `json:"supports_rate_limit,omitempty"`
	RuntimeCapabilities []string        `json:"runtime_capabilities,omitempty"`
	RuntimeLookups      []hashLookup    `json:"runtime_lookups,omitempty"`
}

// hashAction keeps exactly the behavioural fields of an action. A missing
// schema is a nil map and encodes as null.
type hashAction struct {
	Name         string         `json:"name"`
	InputSchema  map[string]any `json:"input_schema"`
	ResultSchema map[string]any `json:"result_schema"`
	TimeoutMs    int            `json:"timeout_ms"`
	Retry        Retry          `json:"retry"`
	DLQ          string         `json:"dlq"`
}

// hashLookup drops the lookup's display_name and description.
type hashLookup struct {
	Name         string       `json:"name"`
	Params       []InputField `json:"params"`
	ResultFields []InputField `json:"result_fields"`
}

// HashInput returns the canonical bytes the manifest hash is computed over.
// The manifest itself is not modified.
func HashInput(m *Manifest) ([]byte, error) {
	in := hashInput{
		SupportsRateLimit: m.SupportsRateLimit,
	}

	for _, a := range m.Actions {
		in.Actions = append(in.Actions, hashAction{
			Name:         a.Name,
			InputSchema:  a.InputSchema,
			ResultSchema: a.ResultSchema,
			TimeoutMs:    a.TimeoutMs,
			Retry:        a.Retry,
			DLQ:          a.DLQ,
		})
	}
	sort.SliceStable(in.Actions, func(i, j int) bool { return in.Actions[i].Name < in.Actions[j].Name })

	in.ServiceSources = append(in.ServiceSources, m.ServiceSources...)
	sort.SliceStable(in.ServiceSources, func(i, j int) bool { return in.ServiceSources[i].Name < in.ServiceSources[j].Name })

	in.SupportsNodes = sortedStrings(m.SupportsNodes)
	in.RuntimeCapabilities = sortedStrings(m.RuntimeCapabilities)

	for _, l := range m.RuntimeLookups {
		in.RuntimeLookups = append(in.RuntimeLookups, hashLookup{
			Name:         l.Name,
			Params:       sortedFields(l.Params),
			ResultFields: sortedFields(l.ResultFields),
		})
	}
	sort.SliceStable(in.RuntimeLookups, func(i, j int) bool { return in.RuntimeLookups[i].Name < in.RuntimeLookups[j].Name })

	return encodeJSON(in)
}

// Hash returns "sha256:<lowercase hex>" of the manifest's canonical bytes,
// together with those bytes.
func Hash(m *Manifest) (hash string, canonical []byte, err error) {
	canonical, err = HashInput(m)
	if err != nil {
		return "", nil, err
	}
	return hashOf(canonical), canonical, nil
}

func hashOf(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// sortedStrings returns a sorted copy, or nil for an empty list. Appending to
// a nil slice keeps it nil when there is nothing to append.
func sortedStrings(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// sortedFields returns a copy sorted by name (stable), or nil when empty.
func sortedFields(f []InputField) []InputField {
	out := append([]InputField(nil), f...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
