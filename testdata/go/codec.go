package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// encodeJSON is how this program writes every JSON value: an Encoder with
// SetEscapeHTML(false), the trailing newline stripped, and the result passed
// through modernize (escape.go), so that every byte string compared or hashed
// is in the Go >= 1.22 form.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return modernize(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}

// decodeJSON decodes exactly one JSON value into v, as json.Unmarshal does
// (unknown keys ignored, trailing data rejected).
func decodeJSON(data []byte, v any) error {
	return json.Unmarshal(data, v)
}

// decodeStrict is decodeJSON with unknown keys rejected. It is only used to
// explain a mismatch (an unknown key is dropped by a round trip).
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	return expectEOF(dec)
}

// decodeNumbers decodes one JSON value keeping numbers as json.Number, so
// integers beyond 2^53 and negative values survive exactly.
func decodeNumbers(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	return expectEOF(dec)
}

func expectEOF(dec *json.Decoder) error {
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("unexpected data after the top-level JSON value")
	}
	return nil
}

// compactJSON removes insignificant whitespace, leaving every token as is.
func compactJSON(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
