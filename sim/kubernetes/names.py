"""Kubernetes' name and field-error helpers, as admission code calls them: the validators of
k8s.io/apimachinery at v0.35.0 (the library of Kubernetes 1.35) pkg/util/validation/validation.go
(IsDNS1123Label, IsDNS1123Subdomain, IsDNS1035Label, IsDomainPrefixedPath) and
pkg/api/validate/content/kube.go (IsLabelKey, IsLabelValue), and the error values of
pkg/util/validation/field/errors.go (`<path>: <type>: <detail>`, what every webhook and the API
server return).

Each webhook port in sim/admission builds on these, so a name one of them refuses reads exactly as the
API server's or the webhook's message would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT = DNS1123_LABEL_FMT + "(\\." + DNS1123_LABEL_FMT + ")*"
DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
LABEL_KEY_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE_FMT = "(" + LABEL_KEY_FMT + ")?"
HTTP_PATH_FMT = r"[A-Za-z0-9/\-._~%!$&'()*+,;=:]+"
LABEL_MAX, SUBDOMAIN_MAX = 63, 253


def max_len_error(length: int) -> str:
    return f"must be no more than {length} characters"


def regex_error(message: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    # Go's loop: each example as "'x', ", joined by " or " (hence the double space).
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{fmt}')"


def _full(fmt: str, value: str) -> bool:
    return re.fullmatch(fmt, value) is not None


def dns1123_label(value: str) -> list[str]:
    errs = [max_len_error(LABEL_MAX)] if len(value) > LABEL_MAX else []
    if not _full(DNS1123_LABEL_FMT, value):
        if _full(DNS1123_SUBDOMAIN_FMT, value):
            errs.append("must not contain dots")
        else:
            errs.append(
                regex_error(
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                    "and must start and end with an alphanumeric character",
                    DNS1123_LABEL_FMT,
                    "my-name",
                    "123-abc",
                )
            )
    return errs


def dns1123_subdomain(value: str) -> list[str]:
    errs = [max_len_error(SUBDOMAIN_MAX)] if len(value) > SUBDOMAIN_MAX else []
    if not _full(DNS1123_SUBDOMAIN_FMT, value):
        errs.append(
            regex_error(
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                "'.', and must start and end with an alphanumeric character",
                DNS1123_SUBDOMAIN_FMT,
                "example.com",
            )
        )
    return errs


def dns1035_label(value: str) -> list[str]:
    errs = [max_len_error(LABEL_MAX)] if len(value) > LABEL_MAX else []
    if not _full(DNS1035_LABEL_FMT, value):
        errs.append(
            regex_error(
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                "alphabetic character, and end with an alphanumeric character",
                DNS1035_LABEL_FMT,
                "my-name",
                "abc-123",
            )
        )
    return errs


_LABEL_KEY_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
    "character"
)


def label_key(value: str) -> list[str]:
    """content.IsLabelKey (also what Kubernetes calls a qualified name)."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) > 2:
        return [
            "a valid label key "
            + regex_error(_LABEL_KEY_MSG, LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    name = parts[-1]
    if len(parts) == 2:
        if not parts[0]:
            errs.append("prefix part must be non-empty")
        else:
            errs += [f"prefix part {m}" for m in dns1123_subdomain(parts[0])]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > LABEL_MAX:
        errs.append(f"name part {max_len_error(LABEL_MAX)}")
    if not _full(LABEL_KEY_FMT, name):
        errs.append("name part " + regex_error(_LABEL_KEY_MSG, LABEL_KEY_FMT, "MyName", "my.name", "123-abc"))
    return errs


def label_value(value: str) -> list[str]:
    errs = [max_len_error(LABEL_MAX)] if len(value) > LABEL_MAX else []
    if not _full(LABEL_VALUE_FMT, value):
        errs.append(
            regex_error(
                "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
                "'.', and must start and end with an alphanumeric character",
                LABEL_VALUE_FMT,
                "MyValue",
                "my_value",
                "12345",
            )
        )
    return errs


@dataclass(frozen=True)
class FieldError:
    """field.Error: the path, the type (Required, Invalid, Duplicate, Too many, Unsupported value,
    Forbidden, Too long, Internal error) and the detail."""

    path: str
    type: str
    detail: str = ""
    value: Any = None

    def __str__(self) -> str:
        shown = "" if self.value is None else f"{self.value!r}: "
        return f"{self.path}: {self.type}: {shown}{self.detail}".rstrip(": ")


def domain_prefixed_path(path: str, value: str) -> list[FieldError]:
    """validation.IsDomainPrefixedPath (e.g. a managedBy or a runtime patch's manager)."""
    if not value:
        return [FieldError(path, "Required value")]
    host, _, rest = value.partition("/")
    if not host or not rest:
        return [
            FieldError(path, "Invalid value", 'must be a domain-prefixed path (such as "acme.io/foo")', value)
        ]
    errs = [FieldError(path, "Invalid value", m, host) for m in dns1123_subdomain(host)]
    if not _full(HTTP_PATH_FMT, rest):
        errs.append(FieldError(path, "Invalid value", regex_error("Invalid path", HTTP_PATH_FMT), rest))
    return errs
