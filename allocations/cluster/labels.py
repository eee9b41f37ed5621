"""Kubernetes label selectors in their string form (`kubectl -l`), for a pool's node selector.

A pool takes the GPU nodes whose labels match its selector, e.g. `nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3`
(the labels NFD and GPU feature discovery put on nodes). The syntax is the API machinery's
(k8s.io/apimachinery/pkg/labels): requirements joined by commas, each one of

    key            the label is set            !key             it is not
    key=value      key==value                  key!=value       (a missing label also matches !=)
    key in (a,b)   key notin (a,b)             (notin also matches a missing label)

Keys are `[DNS subdomain prefix/]name` (name: at most 63 characters, alphanumerics, '-', '_', '.', starting and
ending with an alphanumeric); values follow the name rule and may be empty. Pure Python, no Django.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
# Tokens: operators first (longest first), then parentheses and commas, then words (keys and values).
_TOKEN = re.compile(r"\s*(==|!=|=|!|\(|\)|,|[^\s=!(),]+)")
MAX_LENGTH = 1000


class InvalidSelector(ValueError):
    """The selector is not valid Kubernetes label selector syntax; the message says where and why."""


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str  # "exists", "!exists", "=", "!=", "in", "notin"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "exists":
            return present
        if self.operator == "!exists":
            return not present
        if self.operator in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # "!=" and "notin"

    def __str__(self) -> str:
        if self.operator == "exists":
            return self.key
        if self.operator == "!exists":
            return f"!{self.key}"
        if self.operator in ("=", "!="):
            return f"{self.key}{self.operator}{self.values[0]}"
        return f"{self.key} {self.operator} ({','.join(self.values)})"


@dataclass(frozen=True, slots=True)
class Selector:
    """Every requirement must hold. An empty selector matches no node here: a pool without a selector takes
    no discovered node (its nodes are registered by hand, as on the simulated backend)."""

    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return bool(self.requirements) and all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _check_key(key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        raise InvalidSelector(f"Label key {key!r} has an empty prefix before '/'.")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise InvalidSelector(
            f"Label key {key!r}: the prefix {prefix!r} must be a DNS subdomain (lower case letters, digits, "
            "'-' and '.'; at most 253 characters)."
        )
    if not name or len(name) > 63 or not _NAME.match(name):
        raise InvalidSelector(
            f"Label key {key!r}: the name must be 1 to 63 letters, digits, '-', '_' or '.', starting and ending "
            "with a letter or digit."
        )


def _check_value(key: str, value: str) -> None:
    if value and (len(value) > 63 or not _NAME.match(value)):
        raise InvalidSelector(
            f"Value {value!r} of {key!r}: at most 63 letters, digits, '-', '_' or '.', starting and ending with a "
            "letter or digit."
        )


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise InvalidSelector(f"Unexpected character at position {position + 1}: {text[position:][:20]!r}.")
        out.append(match.group(1))
        position = match.end()
    return out


def parse_selector(text: str) -> Selector:
    """Parse a label selector; raises InvalidSelector with a message fit for a form field."""
    if len(text) > MAX_LENGTH:
        raise InvalidSelector(f"At most {MAX_LENGTH} characters.")
    tokens = _tokens(text)
    requirements: list[Requirement] = []
    i = 0

    def take() -> str:
        nonlocal i
        if i >= len(tokens):
            raise InvalidSelector("The selector ends too early.")
        found = tokens[i]
        i += 1
        return found

    while i < len(tokens):
        word = take()
        if word == "!":
            key = take()
            _check_key(key)
            requirements.append(Requirement(key, "!exists"))
        elif word in ("=", "==", "!=", "(", ")", ","):
            raise InvalidSelector(f"Expected a label key, found {word!r}.")
        else:
            key = word
            _check_key(key)
            following = tokens[i] if i < len(tokens) else ","
            if following == ",":
                requirements.append(Requirement(key, "exists"))
            elif following in ("=", "==", "!="):
                i += 1
                value = tokens[i] if i < len(tokens) and tokens[i] not in (",", "(", ")", "=", "==", "!=", "!") else ""
                if value:
                    i += 1
                _check_value(key, value)
                requirements.append(Requirement(key, "!=" if following == "!=" else "=", (value,)))
            elif following in ("in", "notin"):
                i += 1
                if take() != "(":
                    raise InvalidSelector(f"Expected '(' after {key} {following}.")
                values: list[str] = []
                while True:
                    value = take()
                    if value == ")" and not values:
                        raise InvalidSelector(f"{key} {following} (): list at least one value.")
                    if value in (",", ")"):
                        value = ""
                        i -= 1
                    _check_value(key, value)
                    values.append(value)
                    separator = take()
                    if separator == ")":
                        break
                    if separator != ",":
                        raise InvalidSelector(f"Expected ',' or ')' in the values of {key}, found {separator!r}.")
                requirements.append(Requirement(key, following, tuple(sorted(set(values)))))
            else:
                raise InvalidSelector(
                    f"After {key!r}: expected '=', '==', '!=', 'in', 'notin' or ',', found {following!r}."
                )
        if i < len(tokens):
            if tokens[i] != ",":
                raise InvalidSelector(f"Expected ',' between requirements, found {tokens[i]!r}.")
            i += 1
            if i == len(tokens):
                raise InvalidSelector("The selector ends with a comma.")
    return Selector(tuple(requirements))


def selector_or_none(text: str) -> Selector | None:
    """The parsed selector, or None when it is blank or (stored before validation) malformed."""
    if not text.strip():
        return None
    try:
        return parse_selector(text)
    except InvalidSelector:
        return None
