"""The one validator per rule for the names, labels, counts and durations a user hands over,
whether on the command line or in a spec file; `field` is the flag or the field path.

Every pattern is matched whole (`fullmatch`: a trailing newline is not a name), digits are ASCII
(`٣` is not 3), and an error quotes at most a short prefix of the offending value.
"""

from __future__ import annotations

import math
import re

from gpuctl.errors import UsageError

# A DNS-1123 label, short enough that "<nodegroup>-<index>" node names stay valid.
MAX_NAME_LENGTH = 40
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# Kubernetes label syntax (apimachinery validation.IsQualifiedName / IsValidLabelValue).
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
ASCII_COUNT = re.compile(r"[0-9]{1,9}")  # a whole number: ASCII digits, no sign, '_' or space
MAX_TEXT_LENGTH = 1024
SHOWN_PREFIX = 40

MAX_NODES = 5000
MAX_DURATION_S = 24 * 3600.0


def shown(value: object) -> str:
    """`value` quoted for an error line: at most a short prefix, control characters escaped."""
    text = str(value)
    if len(text) <= SHOWN_PREFIX:
        return repr(text)
    return f"{text[:SHOWN_PREFIX]!r}... ({len(text)} characters)"


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
    """A whole number written in ASCII digits (no sign, no '_', no spaces, at most 9 digits)."""
    if not ASCII_COUNT.fullmatch(text):
        raise UsageError(field, f"{shown(text)} is not a whole number", "write ASCII digits, e.g. 2")
    return int(text)


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
