"""The wire contract's byte rules (docs/wire.md), in plain Python.

- ``encode``: Go's ``json.Encoder`` with ``SetEscapeHTML(false)``, trailing newline stripped.
  A ``Struct`` is a Go struct (fields in declared order, ``int`` written as a decimal); a plain
  ``dict`` is a Go ``map[string]any`` (keys sorted byte-wise, every number a float64).
- ``compact``: a ``json.RawMessage`` copied, compacted, byte for byte.
- ``go_time``: Go's RFC 3339 text with nanoseconds, trailing zeros trimmed.
- ``parse_time``: reads any RFC 3339 precision (beyond nine digits truncated).
- ``manifest_hash``: ``sha256:`` + hex of the canonical subset (docs/wire.md "The manifest hash").
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import re
from decimal import Decimal


class Struct(dict):
    """A Go struct: fields written in insertion order, integers as plain decimals."""


class RawJSON:
    """Bytes that are already JSON (a DLQ entry's body): written compacted, as they are."""

    def __init__(self, data: bytes):
        self.data = data


# ---------------------------------------------------------------------------------------------
# numbers


def go_float(f: float) -> str:
    """Go's encoding/json text for a float64 (strconv 'f' or 'e' with the shortest digits)."""
    if math.isnan(f) or math.isinf(f):
        raise ValueError(f"unsupported value: {f!r}")
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    sign, digits, exp = Decimal(repr(f)).as_tuple()
    s = "".join(map(str, digits))
    stripped = s.rstrip("0")
    exp += len(s) - len(stripped)
    s = stripped
    n = len(s)
    sci = exp + n - 1  # the exponent of the first digit
    neg = "-" if sign else ""
    a = abs(f)
    if a < 1e-6 or a >= 1e21:
        mant = s[0] + ("." + s[1:] if n > 1 else "")
        e = f"{abs(sci):02d}"
        if sci < 0 and e[0] == "0" and len(e) == 2:  # Go cleans e-07 to e-7
            e = e[1]
        return f"{neg}{mant}e{'-' if sci < 0 else '+'}{e}"
    if exp >= 0:
        return neg + s + "0" * exp
    point = n + exp
    if point > 0:
        return neg + s[:point] + "." + s[point:]
    return neg + "0." + "0" * (-point) + s


# ---------------------------------------------------------------------------------------------
# strings

_SHORT = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def go_string(s: str) -> str:
    out = ['"']
    for ch in s:
        c = ord(ch)
        if ch in _SHORT:
            out.append(_SHORT[ch])
        elif c < 0x20:
            out.append(f"\\u{c:04x}")
        elif c == 0x2028 or c == 0x2029:
            out.append(f"\\u{c:04x}")
        elif 0xD800 <= c <= 0xDFFF:  # a lone surrogate: Go writes the replacement character
            out.append("\\ufffd")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _key_bytes(k: str) -> bytes:
    return k.encode("utf-8", "surrogatepass")


# ---------------------------------------------------------------------------------------------
# the encoder


def _enc(v, free: bool, out: list) -> None:
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, RawJSON):
        out.append(compact(v.data).decode("utf-8", "surrogatepass"))
    elif isinstance(v, Struct):
        out.append("{")
        first = True
        for k, x in v.items():
            if not first:
                out.append(",")
            first = False
            out.append(go_string(k))
            out.append(":")
            _enc(x, False, out)
        out.append("}")
    elif isinstance(v, dict):
        out.append("{")
        first = True
        for k in sorted(v.keys(), key=_key_bytes):
            if not first:
                out.append(",")
            first = False
            out.append(go_string(k))
            out.append(":")
            _enc(v[k], True, out)
        out.append("}")
    elif isinstance(v, (list, tuple)):
        out.append("[")
        for i, x in enumerate(v):
            if i:
                out.append(",")
            _enc(x, free, out)
        out.append("]")
    elif isinstance(v, int):
        if free:
            out.append(go_float(float(v)))
        else:
            out.append(str(v))
    elif isinstance(v, float):
        out.append(go_float(v))
    elif isinstance(v, str):
        out.append(go_string(v))
    else:
        raise TypeError(f"cannot encode {type(v).__name__}")


def encode(v) -> bytes:
    """Go's json.Encoder bytes (HTML escaping off, no trailing newline)."""
    out: list = []
    _enc(v, not isinstance(v, Struct), out)
    return "".join(out).encode("utf-8", "surrogatepass")


def _reject_constant(name):
    raise ValueError(f"not JSON: {name}")


def decode(data: bytes):
    """Parse JSON as Go would accept it (no NaN/Infinity)."""
    text = data.decode("utf-8")
    return json.loads(text, parse_constant=_reject_constant, parse_int=_parse_int, parse_float=_parse_float)


def _parse_float(text: str) -> float:
    f = float(text)
    if math.isinf(f):  # Go refuses a number beyond float64's range
        raise ValueError(f"number {text} is out of range")
    return f


def _parse_int(text: str):
    # "-0" is a float64 -0 for Go's map[string]any; Python's int would lose the sign.
    if text == "-0":
        return -0.0
    v = int(text)
    try:
        float(v)
    except OverflowError:
        raise ValueError(f"number {text[:20]}... is out of range") from None
    return v


def compact(data: bytes) -> bytes:
    """Remove insignificant whitespace from valid JSON, strings and numbers kept verbatim."""
    out = bytearray()
    in_str = False
    esc = False
    for b in data:
        if in_str:
            out.append(b)
            if esc:
                esc = False
            elif b == 0x5C:
                esc = True
            elif b == 0x22:
                in_str = False
        elif b in (0x20, 0x09, 0x0A, 0x0D):
            continue
        else:
            out.append(b)
            if b == 0x22:
                in_str = True
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# time

GO_ZERO_TIME = "0001-01-01T00:00:00Z"


def go_time_ns(ns: int) -> str:
    """Go's time text for a UTC instant given in nanoseconds since the Unix epoch."""
    secs, frac = divmod(ns, 1_000_000_000)
    t = _dt.datetime(1970, 1, 1) + _dt.timedelta(seconds=secs)
    base = t.strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        base += "." + f"{frac:09d}".rstrip("0")
    return base + "Z"


_TIME_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$"
)


class GoTime:
    """A parsed RFC 3339 time, kept as Go keeps it (local wall clock, nanoseconds, offset)."""

    def __init__(self, y, mo, d, h, mi, s, nanos, offset_min):
        self.parts = (y, mo, d, h, mi, s)
        self.nanos = nanos
        self.offset_min = offset_min

    def text(self) -> str:
        y, mo, d, h, mi, s = self.parts
        out = f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}"
        if self.nanos:
            out += "." + f"{self.nanos:09d}".rstrip("0")
        if self.offset_min == 0:
            return out + "Z"
        sign = "+" if self.offset_min > 0 else "-"
        o = abs(self.offset_min)
        return out + f"{sign}{o // 60:02d}:{o % 60:02d}"


def parse_time(text: str) -> GoTime:
    m = _TIME_RE.match(text)
    if not m:
        raise ValueError(f"not RFC 3339: {text!r}")
    y, mo, d, h, mi, s = (int(m.group(i)) for i in range(1, 7))
    frac = m.group(7) or ""
    nanos = int((frac + "000000000")[:9]) if frac else 0
    if m.group(8):
        off = 0
    else:
        oh, om = int(m.group(10)), int(m.group(11))
        if oh > 23 or om > 59:
            raise ValueError(f"bad offset: {text!r}")
        off = (oh * 60 + om) * (1 if m.group(9) == "+" else -1)
    if s > 59 or mi > 59 or h > 23:
        raise ValueError(f"out of range: {text!r}")
    _dt.date(y, mo, d)  # raises on a bad date
    return GoTime(y, mo, d, h, mi, s, nanos, off)


# ---------------------------------------------------------------------------------------------
# the manifest hash


def _by_name(items):
    return sorted(items, key=lambda x: _key_bytes(x["name"]))


def _nullable(lst):
    return lst if lst else None


def _hash_field(f) -> Struct:
    out = Struct(name=f["name"], type=f["type"])
    if f.get("required"):
        out["required"] = True
    return out


def canonical_manifest(m: dict) -> bytes:
    def retry(a):
        return a.get("retry") or {"max_attempts": 0, "initial_backoff_ms": 0, "backoff_factor": 0.0, "max_backoff_ms": 0}

    actions = [
        Struct(
            name=a["name"],
            input_schema=a.get("input_schema"),
            result_schema=a.get("result_schema"),
            timeout_ms=a["timeout_ms"],
            retry=Struct(
                max_attempts=retry(a)["max_attempts"],
                initial_backoff_ms=retry(a)["initial_backoff_ms"],
                backoff_factor=float(retry(a)["backoff_factor"]),
                max_backoff_ms=retry(a)["max_backoff_ms"],
            ),
            dlq=a["dlq"],
        )
        for a in _by_name(m.get("actions") or [])
    ]
    sources = [
        Struct(name=s["name"], transport=s["transport"], default=s["default"])
        for s in _by_name(m.get("service_sources") or [])
    ]
    subset = Struct(
        actions=_nullable(actions),
        service_sources=_nullable(sources),
        supports_nodes=_nullable(sorted(m.get("supports_nodes") or [], key=_key_bytes)),
    )
    if m.get("supports_rate_limit"):
        subset["supports_rate_limit"] = True
    caps = sorted(m.get("runtime_capabilities") or [], key=_key_bytes)
    if caps:
        subset["runtime_capabilities"] = caps
    lookups = m.get("runtime_lookups") or []
    if lookups:
        subset["runtime_lookups"] = [
            Struct(
                name=lk["name"],
                params=_nullable([_hash_field(f) for f in _by_name(lk.get("params") or [])]),
                result_fields=_nullable(
                    [_hash_field(f) for f in _by_name(lk.get("result_fields") or [])]
                ),
            )
            for lk in _by_name(lookups)
        ]
    return encode(subset)


def manifest_hash(m: dict) -> str:
    return "sha256:" + hashlib.sha256(canonical_manifest(m)).hexdigest()
