"""Go's text forms of values, as the apiserver and kubectl print them in messages the simulator must
reproduce to the letter: ``%q`` (strconv.Quote), ``json.Marshal``, ``%v`` of a float64, and the
type names ``reflect`` gives decoded JSON values. Pure functions, no simulator state.
"""

from __future__ import annotations

import math
from typing import Any


def go_quote(text: str) -> str:
    """Go ``strconv.Quote`` (``%q``)."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in "\a\b\f\n\r\t\v":
            out.append({"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}[ch])
        elif ch == " " or ch.isprintable():
            out.append(ch)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _json_float(value: float) -> str:
    if value != value or value in (math.inf, -math.inf):
        raise ValueError("json: unsupported value")
    if value == int(value) and abs(value) < 1e21:
        return str(int(value)) if value != 0 or math.copysign(1, value) > 0 else "-0"
    exp = math.floor(math.log10(abs(value))) if value else 0
    if exp < -6 or exp >= 21:
        text = repr(value)
        if "e" not in text:
            text = format(value, "e")
        mantissa, _, e = text.partition("e")
        if "." in mantissa:
            mantissa = mantissa.rstrip("0").rstrip(".")
        sign = "-" if e.startswith("-") else "+"
        return f"{mantissa}e{sign}{int(e.lstrip('+-'))}"
    text = repr(value)
    if "e" in text:
        text = format(value, "f").rstrip("0").rstrip(".")
    return text


def _json_string(text: str) -> str:
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif code < 0x20 or ch in "<>&\u2028\u2029":
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def go_json(value: Any) -> str:
    """Go ``json.Marshal`` of a decoded-JSON value (sorted map keys, HTML-safe escaping)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _json_float(value)
    if isinstance(value, str):
        return _json_string(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{_json_string(str(k))}:{go_json(value[k])}" for k in sorted(value, key=str)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    return _json_string(str(value))


def go_float(value: float) -> str:
    """Go's ``%v`` for float64: strconv 'g' with the shortest digits; exponent form when the
    decimal exponent is < -4 or >= 6 (so ``1e+06``, ``123456``, ``1.5e-05``)."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if value == 0:
        return "0" if math.copysign(1, value) > 0 else "-0"
    sign = "-" if value < 0 else ""
    # repr() gives the shortest round-tripping digits, like Go's shortest formatting.
    m, _, e = repr(abs(value)).partition("e")
    int_part, _, frac_part = m.partition(".")
    digits = (int_part + frac_part).lstrip("0")
    if int_part.strip("0"):
        exponent = len(int_part.lstrip("0")) - 1
    else:  # 0.000ddd: the exponent counts the zeros after the point
        exponent = -(len(frac_part) - len(frac_part.lstrip("0")) + 1)
    if e:
        exponent += int(e)
    digits = digits.rstrip("0") or "0"
    if exponent < -4 or exponent >= 6:
        head = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{head}e{'+' if exponent >= 0 else '-'}{abs(exponent):02d}"
    if exponent >= 0:
        whole = digits[: exponent + 1].ljust(exponent + 1, "0")
        frac = digits[exponent + 1 :]
        return sign + whole + ("." + frac if frac else "")
    return sign + "0." + "0" * (-exponent - 1) + digits


def go_type(value: Any) -> str:
    """``reflect.TypeOf(v).String()`` of a decoded JSON value (``interface {}`` for anything else)."""
    if isinstance(value, dict):
        return "map[string]interface {}"
    if isinstance(value, list):
        return "[]interface {}"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    return "interface {}"
