"""Separate a scalar answer into its value and what is written around it: unit, %, °, \\$.

Policy (documented in the grader's README section too):

- A unit matters only when *both* answers carry a recognised physical unit (length, area,
  volume, time, mass, money, speed, temperature). Then the units must have the same
  dimension, and the values are compared after conversion: ``120 minutes`` is ``2 hours``,
  ``5 m`` is not ``5 cm``, ``5 cm^2`` is not ``5 cm``.
- A unit on one side only (``12`` vs ``12 cm``), generic units (``square units``) and count
  nouns (``5 apples`` vs ``5 fruits``) are ignored: the number decides.
- Degrees (``30^\\circ``, ``30°``, ``30 degrees``) are dropped; the comparison also accepts
  the radian value when the other side contains π (``30°`` = ``\\pi/6``).
- Percent: see `equivalence` (``50%`` equals ``50`` and ``0.5``; ``0.5`` never equals ``50``).
- A currency sign (``\\$5``) is the unit "dollar".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# name → (dimension, factor to SI-ish base). Plurals are derived in `_lookup`.
_UNITS = {
    "mm": ("length", 1e-3),
    "millimeter": ("length", 1e-3),
    "millimetre": ("length", 1e-3),
    "cm": ("length", 1e-2),
    "centimeter": ("length", 1e-2),
    "centimetre": ("length", 1e-2),
    "m": ("length", 1.0),
    "meter": ("length", 1.0),
    "metre": ("length", 1.0),
    "km": ("length", 1e3),
    "kilometer": ("length", 1e3),
    "kilometre": ("length", 1e3),
    "in": ("length", 0.0254),
    "inch": ("length", 0.0254),
    "ft": ("length", 0.3048),
    "foot": ("length", 0.3048),
    "feet": ("length", 0.3048),
    "yd": ("length", 0.9144),
    "yard": ("length", 0.9144),
    "mi": ("length", 1609.344),
    "mile": ("length", 1609.344),
    "s": ("time", 1.0),
    "sec": ("time", 1.0),
    "second": ("time", 1.0),
    "min": ("time", 60.0),
    "minute": ("time", 60.0),
    "h": ("time", 3600.0),
    "hr": ("time", 3600.0),
    "hour": ("time", 3600.0),
    "day": ("time", 86400.0),
    "week": ("time", 604800.0),
    "year": ("time", 31536000.0),
    "mg": ("mass", 1e-6),
    "milligram": ("mass", 1e-6),
    "g": ("mass", 1e-3),
    "gram": ("mass", 1e-3),
    "kg": ("mass", 1.0),
    "kilogram": ("mass", 1.0),
    "lb": ("mass", 0.45359237),
    "pound": ("mass", 0.45359237),
    "oz": ("mass", 0.028349523125),
    "ounce": ("mass", 0.028349523125),
    "ton": ("mass", 1000.0),
    "ml": ("volume", 1e-6),
    "milliliter": ("volume", 1e-6),
    "millilitre": ("volume", 1e-6),
    "l": ("volume", 1e-3),
    "liter": ("volume", 1e-3),
    "litre": ("volume", 1e-3),
    "cc": ("volume", 1e-6),
    "gallon": ("volume", 3.785411784e-3),
    "gal": ("volume", 3.785411784e-3),
    "dollar": ("money", 1.0),
    "cent": ("money", 0.01),
    "usd": ("money", 1.0),
    "celsius": ("celsius", 1.0),
    "fahrenheit": ("fahrenheit", 1.0),
    "kelvin": ("kelvin", 1.0),
}
_COMPOUND = {"mph": "mi/h", "kph": "km/h", "kmh": "km/h", "mps": "m/s", "fps": "ft/s"}
_GENERIC = {"unit", "units", "square units", "sq units", "cubic units", "units^2", "units^3", "u"}
_DEGREE_WORDS = {"degree", "degrees", "deg"}
# Words that end an expression rather than name a unit ("min" and "sec" are not here: after a
# number they are minutes and seconds, the functions would need an argument).
_MATH_WORDS = {
    "sin",
    "cos",
    "tan",
    "cot",
    "csc",
    "log",
    "ln",
    "exp",
    "sqrt",
    "pi",
    "arcsin",
    "arccos",
    "arctan",
    "max",
    "gcd",
    "lcm",
    "mod",
    "infty",
    "frac",
    "cdot",
    "times",
}
_TAIL_TOKEN = re.compile(r"(?:\^\s*\{?\s*[23]\s*\}?|[a-zA-Z]+\.?|/)\s*$")


@dataclass(frozen=True)
class Unit:
    """A physical unit: dimension powers like (("length", 2),) and the factor to base units."""

    dims: tuple
    factor: float


@dataclass(frozen=True)
class Quantity:
    """A scalar answer taken apart: the bare value text and what surrounded it."""

    value: str
    unit: Unit | None = None  # a recognised physical unit, else None
    percent: bool = False
    degrees: bool = False


def split_quantity(text: str) -> Quantity:
    """Take the unit, percent sign, degree sign and currency sign off a scalar answer."""
    s = text.strip()
    unit = None
    if "\\$" in s:
        s, unit = s.replace("\\$", " ").strip(), _lookup("dollar")
    temperature = re.search(r"°\s*([CF])(?![a-zA-Z])", s)
    if temperature:
        unit = _lookup("celsius" if temperature.group(1) == "C" else "fahrenheit")
        s = s[: temperature.start()] + s[temperature.end() :]
    degrees = "°" in s
    s = s.replace("°", " ").strip()
    percent = s.endswith("%") or bool(re.search(r"\s(?:percent|pct)\.?$", s))
    s = re.sub(r"(?:%|\s(?:percent|pct)\.?)$", "", s).strip()
    value, tail, spaced = _split_tail(s)
    if tail and _is_unit_tail(value, tail, spaced):
        words = tail.lower().strip()
        if words in _DEGREE_WORDS:
            degrees = True
        elif words not in _GENERIC:
            unit = parse_unit(tail) or unit
        s = value
    return Quantity(s.strip(), unit, percent, degrees)


def parse_unit(text: str) -> Unit | None:
    """The `Unit` for a unit phrase (``km/h``, ``square feet``, ``cm^2``), or None if unknown."""
    t = re.sub(r"\s+", " ", text.strip().rstrip(".")).replace("{", "").replace("}", "")
    t = _COMPOUND.get(t.lower(), t)
    for sep in (" per ", "/"):
        if sep in t:
            num, den = t.split(sep, 1)
            a, b = parse_unit(num), parse_unit(den)
            return _divide(a, b) if a and b else None
    power = 1
    match = re.fullmatch(r"(?:(square|sq\.?|cubic|cu\.?) )?(.+?)(?: ?\^ ?([23])| (squared|cubed))?", t, re.I)
    if match is None:
        return None
    prefix, name, exponent, word = match.groups()
    if prefix:
        power = 2 if prefix.lower().startswith("s") else 3
    elif exponent or word:
        power = int(exponent) if exponent else (2 if word == "squared" else 3)
    base = _lookup(name)
    return Unit(tuple((d, p * power) for d, p in base.dims), base.factor**power) if base else None


def _lookup(name: str) -> Unit | None:
    """A single unit word, singular or plural; case-insensitive except 'L' kept as litre.
    Volumes are cubic lengths, so ``3 mL`` is ``3 cm^3``."""
    key = name.strip().rstrip(".").lower()
    for candidate in (key, key[:-1] if key.endswith("s") else None, key[:-2] if key.endswith("es") else None):
        if candidate and candidate in _UNITS:
            dim, factor = _UNITS[candidate]
            return Unit((("length", 3),) if dim == "volume" else ((dim, 1),), factor)
    return None


def _divide(a: Unit, b: Unit) -> Unit:
    dims = dict(a.dims)
    for dim, power in b.dims:
        dims[dim] = dims.get(dim, 0) - power
    return Unit(tuple(sorted((d, p) for d, p in dims.items() if p)), a.factor / b.factor)


def _split_tail(s: str) -> tuple[str, str, bool]:
    """(value, trailing unit-like words, whether a space separates them)."""
    value, tail = s, ""
    while True:
        match = _TAIL_TOKEN.search(value)
        if match is None or match.start() == 0:
            break
        if value[: match.start()].endswith("\\"):  # a command such as \pi, not a word
            break
        tail = value[match.start() :] + tail
        value = value[: match.start()]
    spaced = value != value.rstrip()
    return value.strip(), tail.strip(), spaced


def _is_unit_tail(value: str, tail: str, spaced: bool) -> bool:
    """Whether `tail` is a unit (or a counted noun) rather than part of the expression."""
    if not value or not re.search(r"[\d})]|\\pi", value) or value.endswith(("^", "_", "/")):
        return False
    words = re.findall(r"[a-zA-Z]+", tail)
    if not words or any(w.lower() in _MATH_WORDS for w in words):
        return False
    known = parse_unit(tail) is not None or tail.lower() in _GENERIC | _DEGREE_WORDS
    if not spaced:
        return known and len(words[0]) >= 2
    return known or all(len(w) >= 2 for w in words)
