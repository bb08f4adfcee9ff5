"""Pair audits: checks of generated minimal pairs whose findings go to curators as flags (see `run`)."""

from builder.audits.overlap import OverlapRow, overlap_table, shared
from builder.audits.run import AuditSummary, audit, overlap_report

__all__ = ["AuditSummary", "OverlapRow", "audit", "overlap_report", "overlap_table", "shared"]
