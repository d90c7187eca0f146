"""Run directory → report.md and report.html (plots, tables, expectations, the paper beside)."""

from testbed.report.build import build_document, write_report

__all__ = ["build_document", "write_report"]
