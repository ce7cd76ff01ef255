package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// reporter collects failures and prints them readably. The first
// detailLimit failures are printed with their diff; later ones get one line
// each, so a run over hundreds of generated cases stays legible.
type reporter struct {
	out         io.Writer
	detailLimit int
	full        bool // also print the complete golden and Go bytes
	failures    int
	warnings    int
}

const (
	defaultDetailLimit = 20
	maxWarningsShown   = 5
	diffContext        = 60 // bytes shown either side of the first difference
)

func newReporter(out io.Writer, full bool) *reporter {
	return &reporter{out: out, detailLimit: defaultDetailLimit, full: full}
}

// fail records a failure that is not a byte comparison (I/O, decode, ...).
func (r *reporter) fail(where string, format string, args ...any) {
	r.failures++
	fmt.Fprintf(r.out, "FAIL %s: %s\n", where, fmt.Sprintf(format, args...))
}

// mismatch records golden bytes that differ from what Go writes. hints are
// extra lines that may explain the difference.
func (r *reporter) mismatch(where, what string, golden, got []byte, hints ...string) {
	r.failures++
	if r.failures > r.detailLimit {
		fmt.Fprintf(r.out, "FAIL %s: %s differs (details omitted after %d failures)\n", where, what, r.detailLimit)
		return
	}
	fmt.Fprintf(r.out, "FAIL %s: %s differs\n", where, what)
	fmt.Fprint(r.out, indent(describeDiff(golden, got), "    "))
	for _, h := range hints {
		fmt.Fprintf(r.out, "    hint: %s\n", h)
	}
	if r.full {
		fmt.Fprintf(r.out, "    golden (%d bytes): %s\n", len(golden), golden)
		fmt.Fprintf(r.out, "    go     (%d bytes): %s\n", len(got), got)
	}
}

// warn records something suspicious that is not a contract violation.
func (r *reporter) warn(where string, format string, args ...any) {
	r.warnings++
	if r.warnings <= maxWarningsShown {
		fmt.Fprintf(r.out, "warning %s: %s\n", where, fmt.Sprintf(format, args...))
	}
}

// describeDiff shows where two byte strings first differ, with some context
// from each and a caret under the first differing character.
func describeDiff(golden, got []byte) string {
	n := len(golden)
	if len(got) < n {
		n = len(got)
	}
	i := 0
	for i < n && golden[i] == got[i] {
		i++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "first difference at byte %d (golden %d bytes, go %d bytes)\n", i, len(golden), len(got))
	switch {
	case i == len(got) && i < len(golden):
		fmt.Fprintf(&b, "golden has %d extra trailing bytes: %q\n", len(golden)-i, clip(golden[i:], 2*diffContext))
	case i == len(golden) && i < len(got):
		fmt.Fprintf(&b, "go writes %d more bytes: %q\n", len(got)-i, clip(got[i:], 2*diffContext))
	}
	start := i - diffContext
	if start < 0 {
		start = 0
	}
	// Start the window on a character boundary of both texts (they agree up
	// to i, so one boundary serves both).
	for start < i && !utf8.RuneStart(golden[start]) {
		start++
	}
	g := window(golden, start, i)
	o := window(got, start, i)
	pad := utf8.RuneCountInString(printable(golden[start:i]))
	if start > 0 {
		pad++ // the leading ellipsis
	}
	caret := strings.Repeat(" ", pad) + "^"
	fmt.Fprintf(&b, "golden: %s\n", g)
	fmt.Fprintf(&b, "go:     %s\n", o)
	fmt.Fprintf(&b, "        %s\n", caret)
	return b.String()
}

// window returns the printable text of b from start to diffContext bytes
// past i, with an ellipsis where text was cut.
func window(b []byte, start, i int) string {
	end := i + diffContext
	if end > len(b) {
		end = len(b)
	}
	for end < len(b) && !utf8.RuneStart(b[end]) {
		end++
	}
	s := printable(b[start:end])
	if start > 0 {
		s = "…" + s
	}
	if end < len(b) {
		s += "…"
	}
	return s
}

// printable keeps the text readable on one line: control bytes (newlines in
// pretty-printed files, raw control characters) are shown as \xNN. Golden
// JSON text is otherwise shown as is, so quotes and backslashes read
// naturally.
func printable(b []byte) string {
	var s strings.Builder
	for _, c := range string(b) {
		if c < 0x20 || c == 0x7f {
			fmt.Fprintf(&s, `\x%02x`, c)
			continue
		}
		s.WriteRune(c)
	}
	return s.String()
}

func clip(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "" {
			b.WriteString(prefix + l)
		}
	}
	return b.String()
}
