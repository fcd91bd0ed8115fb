"""The JSON schema of a report (a subset of JSON Schema draft 2020-12) and a small
validator for that subset, so checking a report needs nothing beyond this package."""

from __future__ import annotations

from typing import Any

from torch_fl_conformance.outcomes import OUTCOMES

_STR = {"type": "string"}
_NUM = {"type": "number"}
_INT = {"type": "integer"}
_BOOL = {"type": "boolean"}
_STRS = {"type": "array", "items": _STR}
_LEVEL = {"type": "string", "enum": ["L0", "L1", "L2", "L3"]}

TEST = {
    "type": "object",
    "required": ["id", "requirement", "strength", "level", "area", "outcome", "duration_s",
                 "message"],
    "properties": {
        "id": _STR, "requirement": {"type": "string", "pattern": r"^TFL-[A-Z]+-\d{3}$"},
        "strength": {"type": "string", "enum": ["MUST", "SHOULD"]}, "level": _LEVEL,
        "area": _STR, "capability": _STR, "outcome": {"type": "string", "enum": list(OUTCOMES)},
        "duration_s": _NUM, "message": _STR, "detail": _STR, "data": {"type": "object"},
        "expectation": {"type": ["object", "null"]},
    },
}

REQUIREMENT = {
    "type": "object",
    "required": ["id", "strength", "level", "capability", "text", "status", "why", "tests"],
    "properties": {
        "status": {"type": "string", "enum": ["met", "not_met", "waived", "skipped",
                                              "unverified", "not_tested"]},
        "tests": _INT, "level": _LEVEL, "failing": _STRS,
    },
}

# What to do next (1.2; absent from older reports).
BLOCKERS = {
    "type": "object", "required": ["level", "items"],
    "properties": {
        "level": {"type": ["string", "null"]}, "more_tests": _INT,
        "items": {"type": "array", "items": {
            "type": "object", "required": ["kind", "level"],
            "properties": {
                "kind": {"type": "string", "enum": ["test", "requirement", "not_tested"]},
                "test": _STR, "requirement": _STR, "outcome": {"type": "string",
                                                             "enum": list(OUTCOMES)},
                "op": _STR, "dtype": _STR, "message": _STR, "kernels": _STRS,
                "fallback_ops": _STRS, "bisect": _STR, "requirements": _STRS}}},
    },
}
NEXT_STEPS = {
    "type": "object", "required": ["count", "items"],
    "properties": {
        "count": _INT, "zoo_models": _STRS, "zoo_error": _STR,
        "items": {"type": "array", "items": {
            "type": "object",
            "required": ["op", "dtype", "action", "kernel", "zoo_calls", "zoo_time_ms",
                         "fallback_calls", "fallback_time_ms", "cases"],
            "properties": {
                "op": _STR, "dtype": _STR, "action": {"type": "string",
                                                       "enum": ["register", "extend"]},
                "kernel": _STR, "native_dtypes": _STRS, "called_as": _STRS,
                "zoo_calls": _INT, "zoo_time_ms": _NUM, "zoo_models": _STRS,
                "zoo_fell_back_in": _STRS, "fallback_calls": _INT, "fallback_time_ms": _NUM,
                "cases": _INT}}},
    },
}
SHOULD_FINDINGS = {"type": "array", "items": {
    "type": "object", "required": ["requirement", "level", "status", "count", "tests"],
    "properties": {"level": _LEVEL, "count": _INT, "tests": {"type": "array"}}}}
NOT_TESTED = {"type": "array", "items": {
    "type": "object", "required": ["level", "reason", "count", "must", "requirements"],
    "properties": {"level": _LEVEL, "reason": _STR, "count": _INT, "must": _INT,
                   "requirements": _STRS}}}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "torchfl-conformance report",
    "type": "object",
    "required": ["schema", "schema_version", "run", "host", "plugin", "level", "summary",
                 "requirements", "tests", "coverage", "op_stats", "errors", "expectations",
                 "integrity"],
    "properties": {
        "schema": {"type": "string", "enum": ["torchfl-conformance-report"]},
        "schema_version": {"type": "string", "pattern": r"^1\.\d+$"},
        "run": {"type": "object", "required": ["started", "finished", "duration_s",
                                               "suite_version", "options"],
                "properties": {"duration_s": _NUM, "options": {
                    "type": "object", "required": ["level", "seed", "certify"],
                    "properties": {"seed": _INT, "level": _LEVEL, "certify": _BOOL}}}},
        "host": {"type": "object", "required": ["torch", "torch_fl", "suite", "hostname"]},
        "plugin": {"type": "object",
                   "required": ["device_type", "plugin_name", "vendor", "version", "abi",
                                "host_abi", "library", "library_sha256", "device_count",
                                "capabilities", "groups"],
                   "properties": {"library_sha256": {"type": "string",
                                                     "pattern": "^[0-9a-f]{64}$"},
                                  "capabilities": _STRS, "device_count": _INT}},
        "level": {"type": "object", "required": ["requested", "achieved", "summary", "levels"],
                  "properties": {"achieved": {"type": "string",
                                              "enum": ["none", "L0", "L1", "L2", "L3"]}}},
        "summary": {"type": "object", "required": ["tests", "outcomes"]},
        "requirements": {"type": "array", "items": REQUIREMENT},
        "tests": {"type": "array", "items": TEST},
        "coverage": {"type": "object", "required": ["classes", "ops", "totals", "by_dtype"],
                     "properties": {"ops": {"type": "array", "items": {
                         "type": "object", "required": ["op", "dtype", "class"],
                         "properties": {"class": {"type": "string", "enum": [
                             "native", "decomposed", "fallback", "error", "wrong", "crash",
                             "timeout", "blocked", "unsupported"]}}}}}},
        "suspects": {"type": "array", "items": {
            "type": "object", "required": ["kernel", "failing_cases", "score"],
            "properties": {"kernel": _STR, "failing_cases": _INT, "score": _NUM}}},
        "blockers": BLOCKERS,
        "next_steps": NEXT_STEPS,
        "should_findings": SHOULD_FINDINGS,
        "not_tested": NOT_TESTED,
        "op_stats": {"type": "object", "required": ["rows", "totals"]},
        "errors": {"type": "object", "required": ["by_outcome", "by_area", "by_kind"]},
        "expectations": {"type": "object", "required": ["applied", "stale", "xpassed"]},
        "files": {"type": "object"},
        "integrity": {"type": "object", "required": ["algorithm", "digest"],
                      "properties": {"digest": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}},
    },
}

_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is(value: Any, type_name: str) -> bool:
    if type_name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if type_name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[type_name])


def validate(value: Any, schema: dict[str, Any] | None = None, path: str = "$") -> list[str]:
    """Errors as 'path: problem'; empty when `value` conforms."""
    import re

    schema = SCHEMA if schema is None else schema
    errors: list[str] = []
    types = schema.get("type")
    if types is not None:
        names = types if isinstance(types, list) else [types]
        if not any(_is(value, t) for t in names):
            return [f"{path}: expected {'/'.join(names)}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if "pattern" in schema and isinstance(value, str) and not re.search(schema["pattern"], value):
        errors.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{path}: missing '{key}'")
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                errors.extend(validate(value[key], sub, f"{path}.{key}"))
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors.extend(validate(item, schema["items"], f"{path}[{i}]"))
            if len(errors) > 50:
                break
    return errors
