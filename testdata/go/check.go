package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// checker walks a testdata tree, recomputes every golden with Go and reports
// each difference.
type checker struct {
	out io.Writer
	rep *reporter

	manifests, shapes, timeCases, schemas, headerFiles, lookupGoldens int
}

func newChecker(out io.Writer, full bool) *checker {
	return &checker{out: out, rep: newReporter(out, full)}
}

// total is the number of golden items checked so far.
func (c *checker) total() int {
	return c.manifests + c.shapes + c.timeCases + c.schemas + c.headerFiles + c.lookupGoldens
}

// knownEntries are the testdata entries `check` understands; "go" is this
// program.
var knownEntries = map[string]bool{
	"manifests": true, "lookup_v1_golden.json": true, "shapes": true,
	"time": true, "schemas": true, "headers": true, "go": true,
}

// checkAll verifies a whole testdata tree. It returns the process exit code.
func (c *checker) checkAll(dir string) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		fmt.Fprintf(c.out, "error: %v\n", err)
		return 2
	}
	for _, e := range entries {
		if !knownEntries[e.Name()] && !strings.HasPrefix(e.Name(), ".") {
			fmt.Fprintf(c.out, "note: not checked by the Go cross-check: %s\n", e.Name())
		}
	}

	if d := filepath.Join(dir, "manifests"); c.present(d, "manifests") {
		c.checkManifestDir(d)
	}
	if f := filepath.Join(dir, "lookup_v1_golden.json"); c.present(f, "lookup_v1_golden.json") {
		c.checkLookupGolden(f)
	}
	if d := filepath.Join(dir, "shapes"); c.present(d, "shapes") {
		c.checkShapes(d)
	}
	if d := filepath.Join(dir, "time"); c.present(d, "time") {
		c.checkTime(filepath.Join(d, "cases.json"))
	}
	if d := filepath.Join(dir, "schemas"); c.present(d, "schemas") {
		c.checkSchemas(d)
	}
	if d := filepath.Join(dir, "headers"); c.present(d, "headers") {
		c.checkHeaders(d)
	}

	if c.total() == 0 && c.rep.failures == 0 {
		fmt.Fprintf(c.out, "FAIL %s: nothing to check (no golden files found)\n", dir)
		return 1
	}
	summary := fmt.Sprintf("%d manifest cases, %d shapes, %d time cases, %d schemas, %d header files, %d lookup golden",
		c.manifests, c.shapes, c.timeCases, c.schemas, c.headerFiles, c.lookupGoldens)
	return c.finish(summary)
}

// checkManifestsOnly verifies one directory of manifest case folders.
func (c *checker) checkManifestsOnly(dir string) int {
	if _, err := os.Stat(dir); err != nil {
		fmt.Fprintf(c.out, "error: %v\n", err)
		return 2
	}
	c.checkManifestDir(dir)
	if c.manifests == 0 && c.rep.failures == 0 {
		fmt.Fprintf(c.out, "FAIL %s: no manifest cases found\n", dir)
		return 1
	}
	return c.finish(fmt.Sprintf("%d manifest cases", c.manifests))
}

func (c *checker) finish(summary string) int {
	if c.rep.warnings > maxWarningsShown {
		fmt.Fprintf(c.out, "(%d more warnings not shown)\n", c.rep.warnings-maxWarningsShown)
	}
	if c.rep.failures > 0 {
		fmt.Fprintf(c.out, "%s checked: %d FAILED\n", summary, c.rep.failures)
		return 1
	}
	fmt.Fprintf(c.out, "%s: all agree with Go\n", summary)
	return 0
}

// present reports whether path exists; a missing folder is not an error.
func (c *checker) present(path, name string) bool {
	_, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(c.out, "skipped: no %s\n", name)
		return false
	}
	if err != nil {
		c.rep.fail(name, "%v", err)
		return false
	}
	return true
}

// checkManifestDir checks every case folder in dir, in name order.
func (c *checker) checkManifestDir(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		c.rep.fail(dir, "%v", err)
		return
	}
	for _, e := range entries {
		if !e.IsDir() {
			fmt.Fprintf(c.out, "note: not a manifest case folder, not checked: %s\n", filepath.Join(dir, e.Name()))
			continue
		}
		c.checkManifestCase(filepath.Join(dir, e.Name()))
	}
}

// checkManifestCase verifies manifest.json against canonical.json and
// hash.txt in one case folder.
func (c *checker) checkManifestCase(caseDir string) {
	c.manifests++
	where := caseDir
	files := map[string][]byte{}
	for _, name := range []string{"manifest.json", "canonical.json", "hash.txt"} {
		b, err := os.ReadFile(filepath.Join(caseDir, name))
		if err != nil {
			c.rep.fail(where, "%v", err)
			return
		}
		files[name] = b
	}
	c.checkManifest(where, files["manifest.json"], files["canonical.json"], string(bytes.TrimSpace(files["hash.txt"])))
}

// checkManifest decodes a wire manifest, proves it re-encodes, and compares
// the canonical bytes and hash Go computes with the golden ones.
func (c *checker) checkManifest(where string, wire, wantCanonical []byte, wantHash string) {
	var m Manifest
	if err := decodeJSON(wire, &m); err != nil {
		c.rep.fail(where, "manifest does not decode as a Go Manifest: %v", err)
		return
	}
	if _, err := encodeJSON(&m); err != nil {
		c.rep.fail(where, "manifest does not re-encode as a Go Manifest: %v", err)
		return
	}
	hash, canonical, err := Hash(&m)
	if err != nil {
		c.rep.fail(where, "hash input does not encode: %v", err)
		return
	}
	if !bytes.Equal(canonical, wantCanonical) {
		c.rep.mismatch(where, "canonical hash input", wantCanonical, canonical)
	}
	if hash != wantHash {
		c.rep.fail(where, "manifest hash: golden %s, go %s", wantHash, hash)
	}
	c.checkEmbeddedHash(where, &m, hash)
}

// checkEmbeddedHash warns when a manifest carries a manifest_hash that is not
// its own hash (placeholders in hand-written goldens are tolerated).
func (c *checker) checkEmbeddedHash(where string, m *Manifest, hash string) {
	if m.ManifestHash != "" && m.ManifestHash != hash {
		c.rep.warn(where, "manifest_hash field is %s, Go computes %s", m.ManifestHash, hash)
	}
}

// checkLookupGolden verifies the cross-language lookup_v1_golden.json:
// {"description", "manifest", "hash_input", "manifest_hash"}.
func (c *checker) checkLookupGolden(path string) {
	c.lookupGoldens++
	data, err := os.ReadFile(path)
	if err != nil {
		c.rep.fail(path, "%v", err)
		return
	}
	var g struct {
		Description  string          `json:"description"`
		Manifest     json.RawMessage `json:"manifest"`
		HashInput    *string         `json:"hash_input"`
		ManifestHash *string         `json:"manifest_hash"`
	}
	if err := decodeJSON(data, &g); err != nil {
		c.rep.fail(path, "%v", err)
		return
	}
	if g.Manifest == nil || g.HashInput == nil || g.ManifestHash == nil {
		c.rep.fail(path, `needs "manifest", "hash_input" and "manifest_hash"`)
		return
	}
	c.checkManifest(path, g.Manifest, []byte(*g.HashInput), *g.ManifestHash)
}

// checkShapes round-trips every shapes/*.json through its Go type.
func (c *checker) checkShapes(dir string) {
	for _, name := range jsonFiles(c, dir) {
		path := filepath.Join(dir, name)
		kind, newValue, ok := shapeFor(name)
		if !ok {
			c.rep.fail(path, "file name names no known shape (known prefixes: %s)", shapeNames())
			continue
		}
		c.shapes++
		golden, err := os.ReadFile(path)
		if err != nil {
			c.rep.fail(path, "%v", err)
			continue
		}
		v := newValue()
		got, err := roundTrip(golden, v)
		if err != nil {
			c.rep.fail(path, "as %s: %v", kind, err)
			continue
		}
		if !bytes.Equal(golden, got) {
			c.rep.mismatch(path, kind+" round trip", golden, got, roundTripHints(golden, newValue, v)...)
		}
		if m, ok := v.(*Manifest); ok {
			if hash, _, err := Hash(m); err == nil {
				c.checkEmbeddedHash(path, m, hash)
			}
		}
	}
}

// checkTime verifies time/cases.json.
func (c *checker) checkTime(path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		c.rep.fail(path, "%v", err)
		return
	}
	cases, err := parseTimeCases(data)
	if err != nil {
		c.rep.fail(path, "%v", err)
		return
	}
	for _, tc := range cases {
		c.timeCases++
		got, err := goTimeText(tc)
		if err != nil {
			c.rep.fail(path, "%s: Go cannot produce it: %v", tc.label, err)
			continue
		}
		if got != tc.expected {
			c.rep.fail(path, "%s: golden expects %s, Go writes %s", tc.label, tc.expected, got)
		}
	}
}

// checkSchemas round-trips every schemas/*.json as free-form JSON.
func (c *checker) checkSchemas(dir string) {
	for _, name := range jsonFiles(c, dir) {
		path := filepath.Join(dir, name)
		c.schemas++
		golden, err := os.ReadFile(path)
		if err != nil {
			c.rep.fail(path, "%v", err)
			continue
		}
		var schema map[string]any
		got, err := roundTrip(golden, &schema)
		if err != nil {
			c.rep.fail(path, "as a JSON object: %v", err)
			continue
		}
		if !bytes.Equal(golden, got) {
			c.rep.mismatch(path, "schema round trip", golden, got)
		}
	}
}

// checkHeaders verifies every headers/*.json: the envelope bytes round-trip
// exactly, and the header values agree with the envelope fields.
func (c *checker) checkHeaders(dir string) {
	for _, name := range jsonFiles(c, dir) {
		path := filepath.Join(dir, name)
		c.headerFiles++
		data, err := os.ReadFile(path)
		if err != nil {
			c.rep.fail(path, "%v", err)
			continue
		}
		var hf headersFile
		if err := decodeJSON(data, &hf); err != nil {
			c.rep.fail(path, "%v", err)
			continue
		}
		if hf.Envelope == nil || hf.Headers == nil {
			c.rep.fail(path, `needs "headers" and "envelope"`)
			continue
		}
		var env Envelope
		got, err := roundTrip(hf.Envelope, &env)
		if err != nil {
			c.rep.fail(path, "envelope: %v", err)
			continue
		}
		if !bytes.Equal(hf.Envelope, got) {
			var hints []string
			if compact, err := compactJSON(hf.Envelope); err == nil && bytes.Equal(compact, got) {
				hints = append(hints, "the envelope differs only in whitespace: write it compact inside the headers file")
			}
			hints = append(hints, roundTripHints(hf.Envelope, func() any { return new(Envelope) }, &env)...)
			c.rep.mismatch(path, "envelope round trip", hf.Envelope, got, hints...)
		}
		for _, p := range checkHeaderValues(hf.Headers, &env) {
			c.rep.fail(path, "header %s", p)
		}
	}
}

// jsonFiles lists the *.json files of dir in name order; other entries are
// noted and skipped.
func jsonFiles(c *checker, dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		c.rep.fail(dir, "%v", err)
		return nil
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			fmt.Fprintf(c.out, "note: not a .json file, not checked: %s\n", filepath.Join(dir, e.Name()))
			continue
		}
		names = append(names, e.Name())
	}
	return names
}
