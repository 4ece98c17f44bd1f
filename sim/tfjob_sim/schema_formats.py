"""The string formats a CRD schema may name (kube-openapi's strfmt registry, limited to what
apiextensions supports) and which of them a server of a given minor version checks.

Why here: a format unknown to the server is ignored, not refused, and the set changes between releases
(``k8s-short-name``/``k8s-long-name`` from 1.34), so a value is checked only against the formats the
simulated release knows. Used by :mod:`tfjob_sim.schema_values`.

Contract: ``effective_format(schema, minor)`` is the format a schema's value is checked against ("" for
none); ``format_ok(format, value)`` whether the string is valid in it.
"""

from __future__ import annotations

import base64
import datetime as _dt
import ipaddress
import re

import re2

_RX_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_RX_TIME = re.compile(r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$")
_RX_UUID = re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
_RX_UUID3 = re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
_RX_UUID4 = re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
_RX_UUID5 = re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
_RX_SHORT = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_RX_LONG = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_RX_HOSTNAME = re2.compile(
    r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9-\p{S}\p{L}]{0,61}"
    r"[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z\p{L}]){2,63})$"
)
_RX_MAC = re.compile(r"^([0-9A-Fa-f]{2}[:-]){5}([0-9A-Fa-f]{2})$|^([0-9A-Fa-f]{4}\.){2}([0-9A-Fa-f]{4})$")
_RX_HEXCOLOR = re.compile(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$")
_RX_BSON = re.compile(r"^[0-9a-fA-F]{24}$")
_RX_DURATION_SCALA = re.compile(r"((\d+)\s*([A-Za-zµ]+))")
_RX_GO_DURATION = re.compile(r"^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$|^[-+]?0$")
_SCALA_UNITS = {
    "ns",
    "us",
    "µs",
    "ms",
    "s",
    "m",
    "h",
    "d",
    "w",
    "nanosecond",
    "nanoseconds",
    "microsecond",
    "microseconds",
    "millisecond",
    "milliseconds",
    "second",
    "seconds",
    "sec",
    "secs",
    "minute",
    "minutes",
    "min",
    "mins",
    "hour",
    "hours",
    "hr",
    "hrs",
    "day",
    "days",
    "week",
    "weeks",
    "nanos",
    "micros",
    "millis",
}


def _is_date(s: str) -> bool:
    if not _RX_DATE.match(s):
        return False
    y, m, d = (int(x) for x in s.split("-"))
    try:
        _dt.date(y, m, d)
    except ValueError:
        return False
    return True


def _is_datetime(s: str) -> bool:
    if len(s) < 4:
        return False
    parts = s.lower().split("t")
    if len(parts) < 2 or not _is_date(parts[0]):
        return False
    m = _RX_TIME.search(parts[1])
    return m is not None and m.group(1) <= "23" and m.group(2) <= "59" and m.group(3) <= "59"


def _is_duration(s: str) -> bool:
    if _RX_GO_DURATION.match(s):
        return True
    matches = _RX_DURATION_SCALA.findall(s)
    return bool(matches) and all(unit.lower().strip() in _SCALA_UNITS for _, _, unit in matches)


def _is_base64(s: str) -> bool:
    try:
        base64.b64decode(s, validate=True)
    except (ValueError, TypeError):
        return False
    return True


def _is_ip(s: str, version: int) -> bool:
    try:
        return ipaddress.ip_address(s).version == version
    except ValueError:
        return False


def _is_cidr(s: str) -> bool:
    try:
        ipaddress.ip_network(s, strict=False)
    except ValueError:
        return False
    return "/" in s


def _is_email(s: str) -> bool:
    return bool(re.match(r"^[^@\s<>]+@[^@\s<>]+$", s)) or bool(re.match(r"^[^<>]*<[^@\s<>]+@[^@\s<>]+>$", s))


def _is_uri(s: str) -> bool:
    # govalidator.IsRequestURI == net/url.ParseRequestURI: absolute URI or an absolute path.
    return bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:\S*$", s)) or s.startswith("/")


_FORMAT_CHECKS_BASE = {
    "bsonobjectid": lambda s: bool(_RX_BSON.match(s)),
    "uri": _is_uri,
    "email": _is_email,
    "hostname": lambda s: bool(_RX_HOSTNAME.match(s)),
    "ipv4": lambda s: _is_ip(s, 4),
    "ipv6": lambda s: _is_ip(s, 6),
    "cidr": _is_cidr,
    "mac": lambda s: bool(_RX_MAC.match(s)),
    "uuid": lambda s: bool(_RX_UUID.match(s)),
    "uuid3": lambda s: bool(_RX_UUID3.match(s)),
    "uuid4": lambda s: bool(_RX_UUID4.match(s)),
    "uuid5": lambda s: bool(_RX_UUID5.match(s)),
    "hexcolor": lambda s: bool(_RX_HEXCOLOR.match(s)),
    "byte": _is_base64,
    "password": lambda s: True,
    "date": _is_date,
    "duration": _is_duration,
    "datetime": _is_datetime,
    # Not checked (accepted as-is): isbn, isbn10, isbn13, creditcard, ssn, rgbcolor.
    "isbn": lambda s: True,
    "isbn10": lambda s: True,
    "isbn13": lambda s: True,
    "creditcard": lambda s: True,
    "ssn": lambda s: True,
    "rgbcolor": lambda s: True,
}
_FORMAT_CHECKS_134 = {
    "k8s-short-name": lambda s: len(s) <= 63 and bool(_RX_SHORT.match(s)),
    "k8s-long-name": lambda s: len(s) <= 253 and bool(_RX_LONG.match(s)),
}


def effective_format(schema: dict, minor: int) -> str:
    """apiextensions ``StripUnsupportedFormatsPostProcessor``: unknown formats are ignored."""
    fmt = schema.get("format") or ""
    if not isinstance(fmt, str) or not fmt:
        return ""
    stype = schema.get("type") or ""
    if schema.get("x-kubernetes-int-or-string"):
        return ""  # two types: the post processor strips the format
    if stype in ("", "string"):
        normalized = fmt.replace("-", "")
        if normalized in _FORMAT_CHECKS_BASE or (minor >= 34 and fmt in _FORMAT_CHECKS_134):
            return fmt
        return ""
    if stype == "integer":
        return fmt if fmt in ("int32", "int64") else ""
    if stype == "number":
        return fmt if fmt in ("float", "double") else ""
    return ""


def format_ok(fmt: str, value: str) -> bool:
    check = _FORMAT_CHECKS_BASE.get(fmt.replace("-", "")) or _FORMAT_CHECKS_134.get(fmt)
    return True if check is None else bool(check(value))
