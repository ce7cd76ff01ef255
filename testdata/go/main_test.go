package main

// Every expected byte string below was worked out by hand from the spec and
// design.md, and every expected hash with coreutils (printf '%s' ... |
// sha256sum), not with this program.

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// specExample is the example manifest of wire-protocol.txt, verbatim.
const specExample = `{
  "protocol_version": "1.0.0",
  "service": "my-python-svc",
  "service_version": "dev",
  "manifest_hash": "sha256:6f3a...c91d",
  "actions": [
    {
      "name": "send_inapp",
      "input_schema": {"type": "object", "properties": {"tenant_id": {"type": "string"}}, "required": ["tenant_id"]},
      "result_schema": {"type": "object", "properties": {"delivered": {"type": "boolean"}}, "required": ["delivered"]},
      "timeout_ms": 30000,
      "retry": {"max_attempts": 3, "initial_backoff_ms": 100, "backoff_factor": 2.0, "max_backoff_ms": 5000},
      "dlq": "triggers.v2.dlq.my-python-svc.send_inapp"
    }
  ],
  "service_sources": [
    {"name": "nats", "transport": "nats", "default": "triggers.v2.mysvc.inbound"}
  ],
  "supports_nodes": ["condition", "lookup", "mapping"]
}`

// Schemas become map[string]any (keys sorted), backoff_factor 2.0 becomes 2.
const specExampleCanonical = `{"actions":[{"name":"send_inapp",` +
	`"input_schema":{"properties":{"tenant_id":{"type":"string"}},"required":["tenant_id"],"type":"object"},` +
	`"result_schema":{"properties":{"delivered":{"type":"boolean"}},"required":["delivered"],"type":"object"},` +
	`"timeout_ms":30000,"retry":{"max_attempts":3,"initial_backoff_ms":100,"backoff_factor":2,"max_backoff_ms":5000},` +
	`"dlq":"triggers.v2.dlq.my-python-svc.send_inapp"}],` +
	`"service_sources":[{"name":"nats","transport":"nats","default":"triggers.v2.mysvc.inbound"}],` +
	`"supports_nodes":["condition","lookup","mapping"]}`

const specExampleHash = "sha256:289888788fd67c1c96727dc28cd3e772969279b224e455a0c0543cf09b53606f"

// The spec example as Go writes it on the wire, with its real hash.
const specExampleWire = `{"protocol_version":"1.0.0","service":"my-python-svc","service_version":"dev",` +
	`"manifest_hash":"` + specExampleHash + `","actions":[{"name":"send_inapp",` +
	`"input_schema":{"properties":{"tenant_id":{"type":"string"}},"required":["tenant_id"],"type":"object"},` +
	`"result_schema":{"properties":{"delivered":{"type":"boolean"}},"required":["delivered"],"type":"object"},` +
	`"timeout_ms":30000,"retry":{"max_attempts":3,"initial_backoff_ms":100,"backoff_factor":2,"max_backoff_ms":5000},` +
	`"dlq":"triggers.v2.dlq.my-python-svc.send_inapp"}],` +
	`"service_sources":[{"name":"nats","transport":"nats","default":"triggers.v2.mysvc.inbound"}],` +
	`"supports_nodes":["condition","lookup","mapping"]}`

// Unsorted actions and sources, catalog fields everywhere, rate limit on,
// capabilities unsorted, missing schemas.
const catalogManifest = `{
  "service": "svc", "protocol_version": "1.0.0", "service_version": "2", "manifest_hash": "x",
  "display_name": "Svc", "description": "top", "owner": "team", "tags": ["t"],
  "actions": [
    {"name": "b_send", "display_name": "B send", "description": "d", "version": "2", "lifecycle": "beta",
     "input_schema": {"type": "object"}, "timeout_ms": 1000,
     "retry": {"max_attempts": 1, "initial_backoff_ms": 0, "backoff_factor": 1.5, "max_backoff_ms": 0},
     "dlq": "q.b", "action_env": {"K": "V"}, "result_event": {"event_type": "e"}, "compatibility": {"since": "1"}},
    {"name": "a_send", "input_schema": {}, "result_schema": {"type": "object"}, "timeout_ms": 2000,
     "retry": {"max_attempts": 2, "initial_backoff_ms": 10, "backoff_factor": 2, "max_backoff_ms": 100}, "dlq": "q.a"},
    {"name": "B", "timeout_ms": 0,
     "retry": {"max_attempts": 0, "initial_backoff_ms": 0, "backoff_factor": 0, "max_backoff_ms": 0}, "dlq": ""}
  ],
  "service_sources": [
    {"name": "nats", "transport": "nats", "default": "svc.in"},
    {"name": "kafka", "transport": "kafka", "default": "topic"}
  ],
  "supports_nodes": ["mapping", "condition"],
  "supports_rate_limit": true,
  "runtime_capabilities": ["z.v1", "durable_timer.v1"]
}`

// "B" sorts before "a_send" (byte-wise); missing schemas are null.
const catalogCanonical = `{"actions":[` +
	`{"name":"B","input_schema":null,"result_schema":null,"timeout_ms":0,"retry":{"max_attempts":0,"initial_backoff_ms":0,"backoff_factor":0,"max_backoff_ms":0},"dlq":""},` +
	`{"name":"a_send","input_schema":{},"result_schema":{"type":"object"},"timeout_ms":2000,"retry":{"max_attempts":2,"initial_backoff_ms":10,"backoff_factor":2,"max_backoff_ms":100},"dlq":"q.a"},` +
	`{"name":"b_send","input_schema":{"type":"object"},"result_schema":null,"timeout_ms":1000,"retry":{"max_attempts":1,"initial_backoff_ms":0,"backoff_factor":1.5,"max_backoff_ms":0},"dlq":"q.b"}],` +
	`"service_sources":[{"name":"kafka","transport":"kafka","default":"topic"},{"name":"nats","transport":"nats","default":"svc.in"}],` +
	`"supports_nodes":["condition","mapping"],"supports_rate_limit":true,"runtime_capabilities":["durable_timer.v1","z.v1"]}`

const catalogHash = "sha256:5463db4cdbc0d96f5215522f5035fd28ffaa9c50b59a5e44b372ef57597fa5c0"

// Lookups: display names dropped, empty params null, fields sorted,
// required:false omitted, lookups sorted; empty actions null.
const lookupManifest = `{"protocol_version":"1.0.0","service":"svc","service_version":"1","manifest_hash":"",
  "actions":[],
  "service_sources":[{"name":"nats","transport":"nats","default":"svc.in"}],
  "supports_nodes":["lookup"],
  "runtime_lookups":[
    {"name":"zeta","display_name":"Zeta","description":"z","params":[],
     "result_fields":[{"name":"b","type":"string","required":true},{"name":"a","type":"number","required":false}]},
    {"name":"alpha","params":[{"name":"id","type":"string","required":true}]}
  ]}`

const lookupCanonical = `{"actions":null,"service_sources":[{"name":"nats","transport":"nats","default":"svc.in"}],` +
	`"supports_nodes":["lookup"],"runtime_lookups":[` +
	`{"name":"alpha","params":[{"name":"id","type":"string","required":true}],"result_fields":null},` +
	`{"name":"zeta","params":null,"result_fields":[{"name":"a","type":"number"},{"name":"b","type":"string","required":true}]}]}`

const lookupHash = "sha256:eae67f58654e24e816a7646fcd54e347e9f228805ed9e752bb7e3c90a51443dd"

func mustManifest(t *testing.T, s string) *Manifest {
	t.Helper()
	var m Manifest
	if err := decodeJSON([]byte(s), &m); err != nil {
		t.Fatalf("decode manifest: %v", err)
	}
	return &m
}

func mustCanonical(t *testing.T, s string) string {
	t.Helper()
	b, err := HashInput(mustManifest(t, s))
	if err != nil {
		t.Fatalf("hash input: %v", err)
	}
	return string(b)
}

func TestManifestHashes(t *testing.T) {
	for _, tc := range []struct{ name, manifest, canonical, hash string }{
		{"spec example", specExample, specExampleCanonical, specExampleHash},
		{"catalog fields, unsorted", catalogManifest, catalogCanonical, catalogHash},
		{"lookups", lookupManifest, lookupCanonical, lookupHash},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hash, canonical, err := Hash(mustManifest(t, tc.manifest))
			if err != nil {
				t.Fatal(err)
			}
			if string(canonical) != tc.canonical {
				t.Errorf("canonical:\n got %s\nwant %s", canonical, tc.canonical)
			}
			if hash != tc.hash {
				t.Errorf("hash: got %s, want %s", hash, tc.hash)
			}
		})
	}
}

func TestHashInputDoesNotMutateManifest(t *testing.T) {
	m := mustManifest(t, catalogManifest)
	if _, err := HashInput(m); err != nil {
		t.Fatal(err)
	}
	if m.Actions[0].Name != "b_send" || m.SupportsNodes[0] != "mapping" || m.RuntimeCapabilities[0] != "z.v1" {
		t.Errorf("HashInput reordered the manifest's own slices")
	}
}

func TestEmptyListsAndFlags(t *testing.T) {
	const want = `{"actions":null,"service_sources":null,"supports_nodes":null}`
	for name, m := range map[string]string{
		"empty lists, false flag": `{"actions":[],"service_sources":[],"supports_nodes":[],"supports_rate_limit":false,` +
			`"runtime_capabilities":[],"runtime_lookups":[]}`,
		"absent fields": `{}`,
		"null fields":   `{"actions":null,"service_sources":null,"supports_nodes":null,"runtime_lookups":null}`,
	} {
		if got := mustCanonical(t, m); got != want {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
	}
}

func TestStableActionSort(t *testing.T) {
	got := mustCanonical(t, `{"actions":[{"name":"dup","timeout_ms":2},{"name":"dup","timeout_ms":1},{"name":"a","timeout_ms":3}]}`)
	const retry = `"retry":{"max_attempts":0,"initial_backoff_ms":0,"backoff_factor":0,"max_backoff_ms":0}`
	want := `{"actions":[` +
		`{"name":"a","input_schema":null,"result_schema":null,"timeout_ms":3,` + retry + `,"dlq":""},` +
		`{"name":"dup","input_schema":null,"result_schema":null,"timeout_ms":2,` + retry + `,"dlq":""},` +
		`{"name":"dup","input_schema":null,"result_schema":null,"timeout_ms":1,` + retry + `,"dlq":""}],` +
		`"service_sources":null,"supports_nodes":null}`
	if got != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
}

// schemaCanonical wraps a schema into a one-action manifest and returns the
// canonical text of that schema.
func schemaCanonical(t *testing.T, schema string) string {
	t.Helper()
	got := mustCanonical(t, `{"actions":[{"name":"a","input_schema":`+schema+`}]}`)
	const prefix = `{"actions":[{"name":"a","input_schema":`
	const suffix = `,"result_schema":null,"timeout_ms":0,"retry":{"max_attempts":0,"initial_backoff_ms":0,` +
		`"backoff_factor":0,"max_backoff_ms":0},"dlq":""}],"service_sources":null,"supports_nodes":null}`
	if !strings.HasPrefix(got, prefix) || !strings.HasSuffix(got, suffix) {
		t.Fatalf("unexpected canonical frame: %s", got)
	}
	return strings.TrimSuffix(strings.TrimPrefix(got, prefix), suffix)
}

func TestStringEscapes(t *testing.T) {
	// <>& literal (no HTML escaping), U+2028/U+2029 escaped, \u0001 lowercase
	// hex, \b and \f short (Go >= 1.22 form), DEL and / literal, é literal.
	in := `{"description":"a<b>&c\u2028d\u2029e\u0001f\bg\fh\u007f/i\n\t\r\"\\ \u00e9"}`
	want := `{"description":"a<b>&c\u2028d\u2029e\u0001f\bg\fh` + "\x7f" + `/i\n\t\r\"\\ é"}`
	if got := schemaCanonical(t, in); got != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
}

func TestNumbers(t *testing.T) {
	in := `{"a":2.0,"b":1e21,"c":1e20,"d":1e-7,"e":-0.0,"f":0.000001,"g":1E+2,"h":12345678901234567890}`
	want := `{"a":2,"b":1e+21,"c":100000000000000000000,"d":1e-7,"e":-0,"f":0.000001,"g":100,"h":12345678901234567000}`
	if got := schemaCanonical(t, in); got != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
}

func TestNestedKeysSorted(t *testing.T) {
	in := `{"type":"object","properties":{"z":{"type":["string","null"]},"a":{"b":1,"a":[{"y":1,"x":2}]}}}`
	want := `{"properties":{"a":{"a":[{"x":2,"y":1}],"b":1},"z":{"type":["string","null"]}},"type":"object"}`
	if got := schemaCanonical(t, in); got != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
}

func TestRewriteLegacyEscapes(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`"\u0008"`, `"\b"`},
		{`"\u000c"`, `"\f"`},
		{`"a\u0008b\u000cc"`, `"a\bb\fc"`},
		{`{"k\u0008":"v"}`, `{"k\b":"v"}`},
		// The trap: an escaped backslash, then the letters u0008.
		{`"\\u0008"`, `"\\u0008"`},
		{`"\\\u0008"`, `"\\\b"`},
		{`"\\\\u000c"`, `"\\\\u000c"`},
		{`"\"\u0008"`, `"\"\b"`},
		{`"\u00088"`, `"\b8"`},
		// Other escapes and Go's lowercase-only output.
		{`"\u0001\u001f\u000C\u2028"`, `"\u0001\u001f\u000C\u2028"`},
		{`["\u0008",1,"x\\",{"a":"\u000c"}]`, `["\b",1,"x\\",{"a":"\f"}]`},
		// Truncated text must not panic.
		{`"\u000`, `"\u000`},
		{`"\`, `"\`},
	} {
		if got := string(rewriteLegacyEscapes([]byte(tc.in))); got != tc.want {
			t.Errorf("rewrite(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestEscapeMode(t *testing.T) {
	for v, want := range map[string]bool{
		"go1.19.8": true, "go1.21.0": true, "go1.22rc1": false, "go1.22.0": false,
		"go1.23.4": false, "devel go1.24-abcdef Tue": false, "devel go1.20-x": true, "weird": false,
	} {
		if got := isBeforeGo122(v); got != want {
			t.Errorf("isBeforeGo122(%q) = %v, want %v", v, got, want)
		}
	}
	if err := selfCheck(); err != nil {
		t.Fatal(err)
	}
}

func TestTimeCases(t *testing.T) {
	cases, err := parseTimeCases([]byte(`[
	  {"input": "2026-05-26T14:30:45.123456789Z", "expected": "2026-05-26T14:30:45.123456789Z"},
	  {"input": "2026-05-26T14:30:45.120000000Z", "expected": "2026-05-26T14:30:45.12Z"},
	  {"input": "2026-05-26T14:30:45.000Z", "expected": "2026-05-26T14:30:45Z"},
	  {"input": "2026-05-26T14:30:45Z", "expected": "2026-05-26T14:30:45Z"},
	  {"input": "2026-05-26T16:30:45.5+02:00", "expected": "2026-05-26T16:30:45.5+02:00"},
	  {"unix_ns": 0, "expected": "1970-01-01T00:00:00Z"},
	  {"unix_ns": -1, "expected": "1969-12-31T23:59:59.999999999Z"},
	  {"unix_ns": 9007199254740993, "expected": "1970-04-15T05:59:59.254740993Z"},
	  {"unix_ns": 1779805845123456789, "expected": "2026-05-26T14:30:45.123456789Z"},
	  {"unix_ns": 1779805845100000000, "expected": "2026-05-26T14:30:45.1Z", "note": "ignored"}
	]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) != 10 {
		t.Fatalf("parsed %d cases", len(cases))
	}
	for _, c := range cases {
		got, err := goTimeText(c)
		if err != nil {
			t.Errorf("%s: %v", c.label, err)
		} else if got != c.expected {
			t.Errorf("%s: got %s, want %s", c.label, got, c.expected)
		}
	}
	for _, bad := range []string{
		`[{"unix_ns": 1.5, "expected": "x"}]`,
		`[{"unix_ns": "5", "expected": "x"}]`,
		`[{"unix_ns": 99999999999999999999, "expected": "x"}]`,
		`[{"input": "x", "unix_ns": 1, "expected": "x"}]`,
		`[{"expected": "x"}]`,
		`[{"input": "x"}]`,
		`{}`,
	} {
		if _, err := parseTimeCases([]byte(bad)); err == nil {
			t.Errorf("parseTimeCases(%s) accepted", bad)
		}
	}
}

// Hand-written goldens, as Go writes them.
const (
	envelopeGolden = `{"trace_id":"0af7651916cd43dd8448eb211c80319c","span_id":"b7ad6b7169203331",` +
		`"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","flow_run_id":"r1","flow_id":"f1",` +
		`"flow_version":9007199254740993,"idempotency_key":"k1","source_node_id":"n0","retry_count":2,` +
		`"emitted_at":"2026-05-26T14:30:45.123456789Z"}`
	heartbeatGolden = `{"service":"svc","service_version":"1.2.3","manifest_hash":"sha256:ab",` +
		`"started_at":"2026-05-26T14:30:45.12345Z","now":"2026-05-26T14:30:50Z","shutting_down":false}`
)

var shapeGoldens = map[string]string{
	"heartbeat.json": heartbeatGolden,
	"completion_event.json": `{"flow_run_id":"r1","flow_id":"f1","flow_version":3,"node_id":"n1","node_type":"action",` +
		`"service":"svc","started_at":"2026-05-26T14:30:45Z","finished_at":"2026-05-26T14:30:45.001Z","status":"ok"}`,
	"completion_event_error.json": `{"flow_run_id":"r1","flow_id":"f1","flow_version":3,"node_id":"n1","node_type":"action",` +
		`"service":"svc","started_at":"2026-05-26T14:30:45Z","finished_at":"2026-05-26T14:30:46Z","status":"error",` +
		`"error":"boom <&> \b","trace_id":"t1"}`,
	"envelope.json": envelopeGolden,
	// The raw body keeps its own key order and number text.
	"dlq_entry.json": `{"kind":"action","envelope":` + envelopeGolden + `,"body":{"b":2.0,"a":[1,2]},` +
		`"err_msg":"timeout","occurred_at":"2026-05-26T14:30:46Z"}`,
	"register_reply.json":         `{"flows":[{"id":"f1","version":1,"body":{"edges":[],"nodes":[{"id":"n1","type":"action"}]}}]}`,
	"register_reply_refused.json": `{"error":"protocol major 2 not supported","flows":null}`,
	"flow_envelope.json":          `{"id":"f1","version":2,"body":{"a":1e+21,"nodes":[]}}`,
	"durable_timer_root.json":     `{"v":1,"kind":"root","flow_id":"f1","flow_version":1,"root_execution_id":"e1"}`,
	"durable_timer_elapsed.json": `{"v":1,"kind":"elapsed","flow_id":"f1","flow_version":1,"root_execution_id":"e1",` +
		`"timer_node_id":"t1","timer_ref":"r","occurrence":1,"fence":7,` +
		`"snapshot_sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",` +
		`"resume_edge_id":"e2","resume_run_id":"r2"}`,
	"manifest_spec_example.json": specExampleWire,
}

// sampleTree is a complete small testdata tree that Go agrees with.
func sampleTree() map[string]string {
	tree := map[string]string{
		"manifests/spec_example/manifest.json":  specExample,
		"manifests/spec_example/canonical.json": specExampleCanonical,
		"manifests/spec_example/hash.txt":       specExampleHash + "\n",
		"manifests/catalog/manifest.json":       catalogManifest,
		"manifests/catalog/canonical.json":      catalogCanonical,
		"manifests/catalog/hash.txt":            catalogHash,
		"lookup_v1_golden.json": `{"description":"lookups","manifest":` + lookupManifest +
			`,"hash_input":` + jsonString(lookupCanonical) + `,"manifest_hash":"` + lookupHash + `"}`,
		"time/cases.json": `[{"input":"2026-05-26T14:30:45.120Z","expected":"2026-05-26T14:30:45.12Z"},` +
			`{"unix_ns":-1,"expected":"1969-12-31T23:59:59.999999999Z"}]`,
		"schemas/optional.json": `{"additionalProperties":{"type":"string"},"properties":{"n":{"type":["integer","null"]}},` +
			`"required":["n"],"type":"object"}`,
		"headers/emit.json": `{"headers":[` +
			`["X-Triggers-Trace-Id","0af7651916cd43dd8448eb211c80319c"],["X-Triggers-Flow-Version","9007199254740993"],` +
			`["x-triggers-retry-count","2"],["X-Triggers-Emitted-At","2026-05-26T14:30:45.123456789Z"],` +
			`["Nats-Msg-Id","k1:dlq:1779805845123456789"],["Content-Type","application/json"]],` +
			`"envelope":` + envelopeGolden + `}`,
	}
	for name, body := range shapeGoldens {
		tree["shapes/"+name] = body
	}
	return tree
}

// jsonString quotes s as a JSON string (the test's own goldens are plain
// ASCII without control characters, so quoting needs only \" and \\).
func jsonString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func runCheck(t *testing.T, files map[string]string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := newChecker(&out, false).checkAll(writeTree(t, files))
	return code, out.String()
}

func TestCheckSampleTree(t *testing.T) {
	code, out := runCheck(t, sampleTree())
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	want := "2 manifest cases, 11 shapes, 2 time cases, 1 schemas, 1 header files, 1 lookup golden: all agree with Go"
	if !strings.Contains(out, want) {
		t.Errorf("summary missing %q in:\n%s", want, out)
	}
	// The spec example carries a placeholder hash: a warning, not a failure.
	if !strings.Contains(out, "warning") || !strings.Contains(out, "sha256:6f3a...c91d") {
		t.Errorf("expected a warning about the placeholder manifest_hash:\n%s", out)
	}
}

func TestCheckDetectsMismatches(t *testing.T) {
	for _, tc := range []struct {
		name, file, body, want string
	}{
		{"time padded to 9 digits", "shapes/heartbeat.json",
			strings.Replace(heartbeatGolden, "45.12345Z", "45.123450000Z", 1), "heartbeat round trip differs"},
		{"trailing newline", "shapes/heartbeat.json", heartbeatGolden + "\n", "extra trailing bytes"},
		{"key order", "shapes/durable_timer_root.json",
			`{"kind":"root","v":1,"flow_id":"f1","flow_version":1,"root_execution_id":"e1"}`, "round trip differs"},
		{"unknown key", "shapes/durable_timer_root.json",
			`{"v":1,"kind":"root","flow_id":"f1","flow_version":1,"root_execution_id":"e1","extra":1}`, `unknown field "extra"`},
		{"legacy escape in golden", "schemas/optional.json", `{"description":"\u0008"}`, "schema round trip differs"},
		{"float text", "schemas/optional.json", `{"maximum":2.0}`, "schema round trip differs"},
		{"html escaped", "schemas/optional.json", `{"description":"\u003c"}`, "schema round trip differs"},
		{"dlq envelope as string", "shapes/dlq_entry.json", `{"kind":"action","envelope":"{}","body":null,"err_msg":"","occurred_at":"2026-05-26T14:30:46Z"}`, "decode"},
		{"unknown shape", "shapes/mystery.json", `{}`, "names no known shape"},
		{"wrong hash", "manifests/spec_example/hash.txt", "sha256:00", "manifest hash: golden sha256:00"},
		{"canonical with []", "manifests/catalog/canonical.json", strings.Replace(catalogCanonical, `"actions":[`, `"actions":[ `, 1), "canonical hash input differs"},
		{"missing canonical", "manifests/extra/manifest.json", specExample, "canonical.json"},
		{"lookup hash_input", "lookup_v1_golden.json", `{"description":"d","manifest":` + lookupManifest +
			`,"hash_input":"{}","manifest_hash":"` + lookupHash + `"}`, "canonical hash input differs"},
		{"time expectation", "time/cases.json", `[{"unix_ns":0,"expected":"1970-01-01T00:00:00.000000000Z"}]`, "Go writes 1970-01-01T00:00:00Z"},
		{"header retry count", "headers/emit.json", `{"headers":[["X-Triggers-Retry-Count","02"]],"envelope":` + envelopeGolden + `}`,
			`X-Triggers-Retry-Count = "02", want "2"`},
		{"header emitted at", "headers/emit.json", `{"headers":[["X-Triggers-Emitted-At","2026-05-26T14:30:45.123456789+00:00"]],"envelope":` + envelopeGolden + `}`,
			`want "2026-05-26T14:30:45.123456789Z"`},
		{"header msg id", "headers/emit.json", `{"headers":[["nats-msg-id","k1:dlq:"]],"envelope":` + envelopeGolden + `}`, "nats-msg-id"},
		{"pretty envelope", "headers/emit.json", `{"headers":[],"envelope":` + strings.Replace(envelopeGolden, `,"span_id"`, `, "span_id"`, 1) + `}`,
			"differs only in whitespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := sampleTree()
			files[tc.file] = tc.body
			code, out := runCheck(t, files)
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out)
			}
		})
	}
}

func TestCheckEmptyAndPartialTrees(t *testing.T) {
	code, out := runCheck(t, map[string]string{"go/go.mod": "module x"})
	if code != 1 || !strings.Contains(out, "nothing to check") || !strings.Contains(out, "skipped: no manifests") {
		t.Errorf("empty tree: exit %d:\n%s", code, out)
	}
	code, out = runCheck(t, map[string]string{"schemas/s.json": `{"type":"string"}`})
	if code != 0 || !strings.Contains(out, "skipped: no shapes") {
		t.Errorf("partial tree: exit %d:\n%s", code, out)
	}
}

func TestCheckManifestsOnly(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"a/manifest.json": lookupManifest, "a/canonical.json": lookupCanonical, "a/hash.txt": lookupHash,
		"b/manifest.json": catalogManifest, "b/canonical.json": catalogCanonical, "b/hash.txt": catalogHash,
	})
	var out bytes.Buffer
	if code := newChecker(&out, true).checkManifestsOnly(dir); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	if err := os.WriteFile(filepath.Join(dir, "b", "canonical.json"), []byte(lookupCanonical), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	code := newChecker(&out, true).checkManifestsOnly(dir)
	if code != 1 || !strings.Contains(out.String(), "golden (") || !strings.Contains(out.String(), catalogCanonical) {
		t.Errorf("exit %d, want 1 with full bytes:\n%s", code, out.String())
	}
}

func TestCommands(t *testing.T) {
	dir := writeTree(t, map[string]string{"m.json": specExample, "l.json": lookupManifest})
	m, l := filepath.Join(dir, "m.json"), filepath.Join(dir, "l.json")

	var stdout, stderr bytes.Buffer
	if code := run([]string{"hash", m, l}, &stdout, &stderr); code != 0 {
		t.Fatalf("hash: exit %d: %s", code, stderr.String())
	}
	if want := specExampleHash + "  " + m + "\n" + lookupHash + "  " + l + "\n"; stdout.String() != want {
		t.Errorf("hash output:\n%s\nwant\n%s", stdout.String(), want)
	}
	if !strings.Contains(stderr.String(), mode.goVersion) {
		t.Errorf("mode line missing from stderr: %q", stderr.String())
	}

	stdout.Reset()
	if code := run([]string{"canon", m}, &stdout, &stderr); code != 0 || stdout.String() != specExampleCanonical {
		t.Errorf("canon: exit %d, output %q", code, stdout.String())
	}
	if code := run([]string{"bogus"}, &stdout, &stderr); code != 2 {
		t.Errorf("bogus command: exit %d, want 2", code)
	}
}
