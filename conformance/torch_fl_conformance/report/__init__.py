"""Certification reports: building (build), the JSON schema (schema), writers for
JSON, HTML, Markdown and JUnit (write), integrity (integrity) and comparison (diff)."""
