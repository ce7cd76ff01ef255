// Command crosscheck is the Go judge for the triggers-lab golden files.
//
// The Rust workspace writes goldens under testdata/; this program recomputes
// each of them independently with Go's encoding/json and time packages (Go
// being the byte reference of the wire contract) and fails on any difference.
//
//	go run . check <testdata-dir>        verify the whole golden tree
//	go run . check-manifests <dir>       verify a directory of manifest cases
//	go run . hash <manifest.json>...     print the manifest hash of each file
//	go run . canon <manifest.json>       print the canonical hash-input bytes
//
// Exit status: 0 all agree, 1 a mismatch or failure, 2 usage or setup error.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `usage:
  crosscheck check <testdata-dir>       verify every golden under the directory
  crosscheck check-manifests <dir>      verify a directory of manifest case folders
  crosscheck hash <manifest.json>...    print "<hash>  <file>" for each wire manifest
  crosscheck canon <manifest.json>      print the canonical hash-input bytes (no newline)
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	// The mode line goes to stderr so that `canon` output stays exact.
	fmt.Fprintln(stderr, mode)
	if err := selfCheck(); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}

	cmd, rest := args[0], args[1:]
	switch {
	case cmd == "check" && len(rest) == 1:
		return newChecker(stdout, false).checkAll(rest[0])
	case cmd == "check-manifests" && len(rest) == 1:
		return newChecker(stdout, true).checkManifestsOnly(rest[0])
	case cmd == "hash" && len(rest) >= 1:
		return hashFiles(rest, stdout, stderr)
	case cmd == "canon" && len(rest) == 1:
		return canonFile(rest[0], stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return 2
}

// hashFiles prints the hash of each wire manifest, sha256sum style.
func hashFiles(paths []string, stdout, stderr io.Writer) int {
	code := 0
	for _, p := range paths {
		m, err := readManifest(p)
		if err == nil {
			var hash string
			if hash, _, err = Hash(m); err == nil {
				fmt.Fprintf(stdout, "%s  %s\n", hash, p)
				continue
			}
		}
		fmt.Fprintf(stderr, "%s: %v\n", p, err)
		code = 1
	}
	return code
}

// canonFile writes the exact canonical bytes, without a trailing newline, so
// the output can be compared with cmp against a canonical.json.
func canonFile(path string, stdout, stderr io.Writer) int {
	m, err := readManifest(path)
	if err == nil {
		var canonical []byte
		if canonical, err = HashInput(m); err == nil {
			if _, err = stdout.Write(canonical); err == nil {
				return 0
			}
		}
	}
	fmt.Fprintf(stderr, "%s: %v\n", path, err)
	return 1
}

func readManifest(path string) (*Manifest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := decodeJSON(data, &m); err != nil {
		return nil, fmt.Errorf("not a wire manifest: %w", err)
	}
	return &m, nil
}
