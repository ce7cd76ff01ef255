package main

// The one place that deals with the Go version quirk.
//
// Go >= 1.22 escapes U+0008 and U+000C in JSON strings as \b and \f. Older
// encoders (Debian's Go 1.19 included) write \u0008 and \u000c instead. The
// goldens hold the >= 1.22 form, so when this program runs on an older Go,
// every byte string it produces is rewritten to the modern form before it is
// compared or hashed. No other output difference between Go 1.19 and later
// encoders is known for these shapes (Go 1.20 made time's JSON decoding
// stricter about RFC 3339, which changes what is accepted, not what is
// written).

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"strings"
)

// escapeMode records whether Go's own output has to be rewritten.
type escapeMode struct {
	goVersion string
	legacy    bool // true: rewrite \u0008/\u000c to \b/\f
}

// mode is decided once, from runtime.Version().
var mode = escapeMode{goVersion: runtime.Version(), legacy: isBeforeGo122(runtime.Version())}

// String is the line printed once at start.
func (m escapeMode) String() string {
	if m.legacy {
		return m.goVersion + `: rewriting legacy \u0008/\u000c escapes to \b/\f`
	}
	return m.goVersion + `: encoder writes \b/\f natively, no rewriting`
}

// isBeforeGo122 reports whether a runtime.Version() string names a Go release
// older than 1.22. It accepts "go1.19.8", "go1.22rc1" and
// "devel go1.23-abcdef ...". A version it cannot read is treated as modern;
// selfCheck then catches the case where that guess is wrong.
func isBeforeGo122(v string) bool {
	i := strings.Index(v, "go1.")
	if i < 0 {
		return false
	}
	rest := v[i+len("go1."):]
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	minor, err := strconv.Atoi(rest[:n])
	if err != nil {
		return false
	}
	return minor < 22
}

// modernize applies the rewrite only when this Go is older than 1.22.
// Every byte string produced by encodeJSON passes through here.
func modernize(b []byte) []byte {
	if !mode.legacy {
		return b
	}
	return rewriteLegacyEscapes(b)
}

// rewriteLegacyEscapes turns the escapes \u0008 and \u000c found inside JSON
// strings into \b and \f. It walks the JSON text, tracking whether it is inside
// a string and consuming every escape sequence whole, so an escaped backslash
// followed by the letters "u0008" (the JSON text \\u0008, meaning a backslash
// then "u0008") is left alone. Only the lowercase hex that Go's encoder writes
// is matched.
func rewriteLegacyEscapes(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u000`)) {
		return b
	}
	out := make([]byte, 0, len(b))
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			out = append(out, c)
			continue
		}
		switch c {
		case '"':
			inString = false
			out = append(out, c)
		case '\\':
			if i+1 >= len(b) { // truncated input: copy as is
				out = append(out, c)
				continue
			}
			if b[i+1] == 'u' && i+6 <= len(b) {
				switch string(b[i+2 : i+6]) {
				case "0008":
					out = append(out, '\\', 'b')
					i += 5
					continue
				case "000c":
					out = append(out, '\\', 'f')
					i += 5
					continue
				}
			}
			// Any other escape: copy the backslash and the escaped byte
			// together, so the byte after an escaped backslash is never
			// taken for the start of a new escape.
			out = append(out, c, b[i+1])
			i++
		default:
			out = append(out, c)
		}
	}
	return out
}

// hasLegacyEscape reports whether JSON text holds a real \u0008 or \u000c
// escape inside a string (used to explain a limitation, see shapes.go).
func hasLegacyEscape(b []byte) bool {
	return !bytes.Equal(rewriteLegacyEscapes(b), b)
}

// selfCheck proves the decision taken from the version string against the
// encoder actually linked in: after modernize, U+0008 and U+000C must come out
// as \b and \f.
func selfCheck() error {
	got, err := encodeJSON("\b\f")
	if err != nil {
		return err
	}
	if want := `"\b\f"`; string(got) != want {
		return fmt.Errorf("escape mode (%s) is wrong for this toolchain: \"\\b\\f\" encodes as %s, want %s", mode, got, want)
	}
	return nil
}
