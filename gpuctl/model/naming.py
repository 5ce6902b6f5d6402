"""The one validator per rule for the names, labels, counts and durations a user hands over,
whether on the command line or in a spec file; `field` is the flag or the field path.

Every pattern is matched whole (`fullmatch`: a trailing newline is not a name), digits are ASCII
(`٣` is not 3), and an error quotes at most a short prefix of the offending value.
"""

from __future__ import annotations

import math
import re

from gpuctl.util.errors import UsageError, shown

# A DNS-1123 label, short enough that "<nodegroup>-<index>" node names stay valid.
MAX_NAME_LENGTH = 40
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# Kubernetes label syntax (apimachinery validation.IsQualifiedName / IsValidLabelValue).
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
ASCII_COUNT = re.compile(r"[0-9]{1,9}")  # a whole number: ASCII digits, no sign, '_' or space
_DIGITS = re.compile(r"[0-9]+")
# More digits than any bound of gpuctl has (int64 has 19): such a number is read as a Huge, never converted
# (Python refuses to convert more than 4,300 digits, and a bound's message must not quote them all).
MAX_DIGITS = 18
MAX_TEXT_LENGTH = 1024

MAX_NODES = 5000
MAX_DURATION_S = 24 * 3600.0


class Huge(int):
    """A whole number of more than MAX_DIGITS digits, as read from a flag or a spec file: above every
    bound (below, when negative), so the bound's validator refuses it with the field and the bound,
    and shown by its length, never by its digits."""

    digits: int

    def __new__(cls, digits: int, negative: bool = False) -> Huge:
        self = super().__new__(cls, -(10 ** MAX_DIGITS) if negative else 10 ** MAX_DIGITS)
        self.digits = digits
        return self

    def __repr__(self) -> str:
        return f"a {'negative ' if self < 0 else ''}number of {self.digits} digits"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)


def whole_number(digits: str, negative: bool = False) -> int:
    """The value of a string of ASCII digits of any length: an int, or a Huge beyond MAX_DIGITS digits."""
    significant = digits.lstrip("0") or "0"
    if len(significant) > MAX_DIGITS:
        return Huge(len(significant), negative)
    return -int(significant) if negative else int(significant)


def check_name(value: str, field: str) -> str:
    """Return `value` if it is a valid cluster, node-group or tenant name, else raise a UsageError."""
    if not isinstance(value, str) or len(value) > MAX_NAME_LENGTH or not _NAME.fullmatch(value):
        raise UsageError(
            field,
            f"{shown(value)} is not a valid name",
            f"use 1-{MAX_NAME_LENGTH} lowercase letters, digits or '-', "
            "starting and ending with a letter or digit (e.g. 'demo-gpu')",
        )
    return value


def check_count(value: int, field: str, minimum: int = 1, maximum: int = MAX_NODES) -> int:
    """Return `value` if minimum <= value <= maximum, else raise a UsageError naming `field`."""
    if value < minimum:
        raise UsageError(field, f"must be at least {minimum}, got {value}", f"pass {field} {minimum} or more")
    if value > maximum:
        raise UsageError(field, f"must be at most {maximum}, got {value}", f"pass {field} {maximum} or less")
    return value


def parse_count(text: str, field: str) -> int:
    """A whole number written in ASCII digits (no sign, no '_', no spaces), of any length: one too long
    to be within any bound comes back as a Huge, for the field's bound check to refuse."""
    if not _DIGITS.fullmatch(text):
        raise UsageError(field, f"{shown(text)} is not a whole number", "write ASCII digits, e.g. 2")
    return whole_number(text)


def check_duration(value: float, field: str, maximum: float = MAX_DURATION_S) -> float:
    """A finite, positive number of seconds, at most `maximum`."""
    if not math.isfinite(value) or value <= 0 or value > maximum:
        raise UsageError(field, f"must be a number of seconds above 0 and at most {maximum:g}, got {value}",
                         "e.g. 300")
    return value


def check_text(value: str, field: str, maximum: int = MAX_TEXT_LENGTH) -> str:
    """Free text (an image, a path, a cloud resource name): bounded, printable, no surrounding space."""
    if not value or len(value) > maximum or not value.isprintable() or value != value.strip():
        raise UsageError(field, f"{shown(value)} is not accepted",
                         f"use 1-{maximum} printable characters without leading or trailing spaces")
    return value


def check_label_key(key: str, field: str) -> str:
    """A Kubernetes label (or taint) key: an optional DNS-subdomain prefix and a name of up to 63."""
    prefix, slash, name = key.rpartition("/")
    if (len(name) > 63 or not _LABEL_NAME.fullmatch(name)
            or (slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)))):
        raise UsageError(field, f"invalid key {shown(key)}",
                         "use [prefix/]name: a name of up to 63 letters, digits, '-', '_' or '.' and an optional "
                         "DNS-subdomain prefix, e.g. nvidia.com/gpu")
    return key


def check_label_value(value: str, field: str) -> str:
    """A Kubernetes label (or taint) value: empty, or up to 63 letters, digits, '-', '_', '.'."""
    if len(value) > 63 or (value and not _LABEL_NAME.fullmatch(value)):
        raise UsageError(field, f"invalid value {shown(value)}",
                         "use up to 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric")
    return value


_REQUIREMENT = re.compile(  # one requirement of a Kubernetes label selector (apimachinery labels.Parse)
    r"(?P<not>!)?\s*(?P<key>[^\s!=<>(),]+)\s*(?:(?P<op>==|=|!=|<|>)\s*(?P<value>[^\s!=<>(),]*)"
    r"|\s(?P<set>in|notin)\s*\((?P<values>[^()]*)\))?")
SELECTOR_HINT = "write requirements joined by ',', e.g. 'gpu=a100,zone in (a,b),!spot'"


def check_selector(text: str, field: str) -> str:
    """A Kubernetes label selector (`k=v`, `k!=v`, `k in (a,b)`, `k notin (a)`, `k`, `!k`, `k>1`), whole:
    every requirement well formed, every key and value valid label syntax; an empty one selects all, so
    it is refused (leave the flag out instead)."""
    check_text(text, field)
    requirements, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            requirements.append(text[start:i])
            start = i + 1
    requirements.append(text[start:])
    for requirement in requirements:
        if not requirement.strip():
            raise UsageError(field, f"an empty requirement in {shown(text)}", SELECTOR_HINT)
        match = _REQUIREMENT.fullmatch(requirement.strip())
        if match is None or (match["not"] and (match["op"] or match["set"])):
            raise UsageError(field, f"{shown(requirement)} is not a label selector requirement", SELECTOR_HINT)
        check_label_key(match["key"], field)
        values = [v.strip() for v in match["values"].split(",")] if match["set"] else \
            [match["value"]] if match["op"] else []
        for value in values:
            check_label_value(value, field)
        if match["op"] in ("<", ">") and not ASCII_COUNT.fullmatch(match["value"]):
            raise UsageError(field, f"{shown(requirement)} compares with {shown(match['value'])}, not a whole number",
                             SELECTOR_HINT)
    return text
