"""Release checks: run before anything is written; any failure stops the release with this report.

Checks: every released item verified by a curator or waived with a reason; minimal-pair integrity;
the pair audits (each concept named once, in its own sentence; no open verdict of the LLM judge;
negative types that the concept similarities contradict are counted, not failed); no duplicate ids
(or duplicate items under two ids); ids stable against the previous release; and per-language
coverage, which fails only when every language is required to have every pair.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import pyarrow as pa
from pydantic import BaseModel

from builder.audits import occurrence
from builder.audits.words import fold
from builder.releases.rows import ConfigRows

SHOWN = 20  # problems listed per check in the rendered report


class CheckResult(BaseModel):
    name: str
    ok: bool
    summary: str
    problems: list[str] = []


class Coverage(BaseModel):
    config: str
    rows: int
    verified: int
    waived: int
    source: int
    excluded: int  # unverified rows left out with --exclude-unverified
    missing: int  # pairs some other language has and this one lacks (minimal-pair configs only)


class CheckReport(BaseModel):
    checks: list[CheckResult]
    coverage: list[Coverage]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def failed(self) -> list[str]:
        return [c.name for c in self.checks if not c.ok]

    def render(self) -> str:
        lines = ["release checks:"]
        for c in self.checks:
            lines.append(f"  [{'ok' if c.ok else 'FAILED'}] {c.name}: {c.summary}")
            for p in c.problems[:SHOWN]:
                lines.append(f"      - {p}")
            if len(c.problems) > SHOWN:
                lines.append(f"      … and {len(c.problems) - SHOWN} more")
        lines.append("  coverage (rows: verified / waived / source; excluded; missing pairs):")
        for cov in self.coverage:
            lines.append(f"    {cov.config:>8}: {cov.rows} ({cov.verified} / {cov.waived} / {cov.source}); "
                         f"excluded {cov.excluded}; missing {cov.missing}")
        return "\n".join(lines)


class ReleaseCheckError(RuntimeError):
    def __init__(self, report: CheckReport) -> None:
        self.report = report
        super().__init__(f"release checks failed ({', '.join(report.failed())}); nothing was written\n{report.render()}")


def _verified(configs: dict[str, ConfigRows], exclude: bool) -> tuple[CheckResult, dict[str, ConfigRows], dict[str, int]]:
    problems = [f"{c.config} {c.ids()[i]}: {why}" for c in configs.values() for i, why in sorted(c.unverified.items())]
    waived = sum(len(c.waived) for c in configs.values())
    excluded = {name: len(c.unverified) for name, c in configs.items()}
    if exclude:
        kept = {name: c.without(set(c.unverified)) for name, c in configs.items()}
        kept = {name: c for name, c in kept.items() if len(c)}
        return (CheckResult(name="verified", ok=True,
                            summary=f"{len(problems)} unverified item(s) left out (--exclude-unverified), {waived} waived"),
                kept, excluded)
    summary = (f"{len(problems)} item(s) neither verified by a curator nor waived "
               "(verify them, waive with `builder releases waive`, or --exclude-unverified)") if problems \
        else f"every item verified by a curator or expert, or English source; {waived} waived"
    return CheckResult(name="verified", ok=not problems, summary=summary, problems=problems), configs, \
        {name: 0 for name in configs}


def _pair_problems(c: ConfigRows, i: int) -> list[str]:
    col = c.columns
    sa, su = col["acceptable_sentence"][i] or "", col["unacceptable_sentence"][i] or ""
    out = []
    if not sa.strip() or not su.strip():
        return ["a sentence is empty"]
    if sa == su:
        out.append("the two sentences are identical")
    if col["negative_type"][i] < 0:
        out.append("unknown negative type")
    acc, unacc = col["acceptable_concept"][i], col["unacceptable_concept"][i]
    if not (col["property"][i] or "").strip() or not (acc or "").strip() or not (unacc or "").strip():
        out.append("a word is missing")
    elif acc == unacc:
        out.append(f"both concepts are {acc!r} in {c.lang}")
    spans = c.concept_spans[i]
    if None in spans:
        out.append("concept spans are missing")
    else:
        a0, a1, u0, u1 = spans
        if not (0 <= a0 < a1 <= len(sa) and 0 <= u0 < u1 <= len(su)):
            out.append(f"concept spans {[a0, a1]} / {[u0, u1]} lie outside the sentences")
        elif sa[:a0] + sa[a1:] != su[:u0] + su[u1:]:
            out.append(f"sentences differ outside the concept: {sa!r} / {su!r}")
    ps = col["property_span"][i]
    if ps is not None and not (0 <= ps[0] < ps[1] <= len(sa)):
        out.append(f"property span {ps} lies outside {sa!r}")
    return out


def _m2c_problems(c: ConfigRows, i: int) -> list[str]:
    col = c.columns
    out = [f"{k} is empty" for k in ("capability", "template_id", "context", "question", "answer")
           if not (col[k][i] or "").strip()]
    if col["answer"][i] in (col["answer_forms"][i] or []):
        out.append("the answer is listed among the wrong inflected forms")
    return out


def _pair_suspects(c: ConfigRows) -> list[int]:
    """Rows that may have a problem: a cheap superset of what `_pair_problems` reports, in one pass."""
    col = c.columns
    rows = zip(col["acceptable_sentence"], col["unacceptable_sentence"], c.concept_spans, col["property_span"],
               col["negative_type"], col["property"], col["acceptable_concept"], col["unacceptable_concept"])
    out = []
    for i, (sa, su, (a0, a1, u0, u1), ps, neg, prop, acc, unacc) in enumerate(rows):
        try:
            fine = (neg >= 0 and sa.strip() and su.strip() and sa != su and prop.strip() and acc.strip()
                    and unacc.strip() and acc != unacc and 0 <= a0 < a1 <= len(sa) and 0 <= u0 < u1 <= len(su)
                    and sa[:a0] + sa[a1:] == su[:u0] + su[u1:] and (ps is None or 0 <= ps[0] < ps[1] <= len(sa)))
        except (TypeError, AttributeError):  # a None where text or an offset belongs
            fine = False
        if not fine:
            out.append(i)
    return out


def _integrity(configs: dict[str, ConfigRows]) -> CheckResult:
    problems = []
    for c in configs.values():
        check = _m2c_problems if c.is_m2c else _pair_problems
        ids = c.ids()
        for i in (range(len(c)) if c.is_m2c else _pair_suspects(c)):
            for p in check(c, i):
                problems.append(f"{c.config} {ids[i]}: {p}")
    n = sum(len(c) for c in configs.values())
    return CheckResult(name="integrity", ok=not problems, problems=problems,
                       summary=f"{len(problems)} problem(s) in {n} item(s)" if problems else f"{n} item(s) well formed")


@dataclass
class AuditFlags:
    """What the pair audits' release check reads beside the rows (`builder.flags`, waivers, language declarations)."""

    scripts: dict[str, tuple[bool, str]] = field(default_factory=dict)  # lang -> (words spaced, script)
    judge: dict[tuple[str, str], str] = field(default_factory=dict)  # (pair id, lang) -> the judge's open flag
    similarity: dict[str, str] = field(default_factory=dict)  # pair id -> open similarity flag
    waived: set[tuple[str, str]] = field(default_factory=set)  # (pair id, lang) released with a waiver


def _named_once_suspects(c: ConfigRows) -> list[int]:
    """Rows where a concept's name may occur twice or in the other sentence: a cheap superset (plain substrings)."""
    col = c.columns
    out = []
    for i, (sa, su, wa, wu, forms) in enumerate(zip(col["acceptable_sentence"], col["unacceptable_sentence"],
                                                      col["acceptable_concept"], col["unacceptable_concept"], c.concept_forms)):
        fa, fu = fold(sa or ""), fold(su or "")
        own_a = [fold(n) for n in (wa, forms[0]) if n]
        own_u = [fold(n) for n in (wu, forms[1]) if n]
        if (any(fa.count(n) > 1 for n in own_a) or any(fu.count(n) > 1 for n in own_u)
                or any(n in fu for n in own_a) or any(n in fa for n in own_u)):
            out.append(i)
    return out


def _audits(configs: dict[str, ConfigRows], flags: AuditFlags) -> CheckResult:
    problems = []
    similar = 0
    for c in configs.values():
        if c.is_m2c:
            continue
        col, ids = c.columns, c.ids()
        spaced, script = flags.scripts.get(c.lang, (True, "Latn"))
        for i in _named_once_suspects(c):
            if (ids[i], c.lang) in flags.waived or None in c.concept_spans[i]:
                continue
            a0, a1, u0, u1 = c.concept_spans[i]
            sides = [occurrence.Side(sentence=col[f"{role}_sentence"][i], span=span,
                                     names=tuple(n for n in (col[f"{role}_concept"][i], form) if n))
                     for role, span, form in (("acceptable", (a0, a1), c.concept_forms[i][0]),
                                              ("unacceptable", (u0, u1), c.concept_forms[i][1]))]
            problems += [f"{c.config} {ids[i]}: {p}" for p in occurrence.problems(*sides, spaced=spaced, script=script)]
        for pid in ids:
            if (pid, c.lang) in flags.judge and (pid, c.lang) not in flags.waived:
                problems.append(f"{c.config} {pid}: {flags.judge[(pid, c.lang)]}")
            similar += c.lang == "en" and pid in flags.similarity
    summary = (f"{len(problems)} finding(s): review the judge's verdicts (`builder review push --stage judge`), "
               "fix the pairs, or waive them" if problems else "each concept named once, in its own sentence; no open "
               "verdict of the LLM judge")
    if similar:
        summary += f"; {similar} random negative(s) more similar than expected (`builder status --flags --stage similarity`)"
    return CheckResult(name="pair audits", ok=not problems, summary=summary, problems=problems)


def _duplicates(configs: dict[str, ConfigRows]) -> CheckResult:
    problems = []
    for c in configs.values():
        seen: dict[str, int] = {}
        content: dict[tuple, str] = {}
        cols = ("context", "question") if c.is_m2c else ("acceptable_sentence", "unacceptable_sentence")
        ids = c.ids()
        if len(set(ids)) == len(ids) == len(set(zip(*(c.columns[k] for k in cols)))):
            continue
        for i, item in enumerate(ids):
            if item in seen:
                problems.append(f"{c.config}: id {item} appears twice")
            seen[item] = i
            key = tuple(c.columns[k][i] for k in cols)
            if key in content and content[key] != item:
                problems.append(f"{c.config}: {item} and {content[key]} are the same item ({' / '.join(key)})")
            content.setdefault(key, item)
    return CheckResult(name="unique ids", ok=not problems, problems=problems,
                       summary=f"{len(problems)} duplicate(s)" if problems else "no duplicate ids or items")


_IDENTITY = {False: ("property_en", "acceptable_concept_en", "unacceptable_concept_en", "negative_type"),
             True: ("lang", "template_id", "context", "question")}


def _stable(configs: dict[str, ConfigRows], previous: dict[str, pa.Table] | None, parent: str | None) -> CheckResult:
    if not previous:
        return CheckResult(name="stable ids", ok=True, summary="first release: nothing to compare with")
    problems, removed = [], 0
    for name, c in configs.items():
        old = previous.get(name)
        if old is None:
            continue
        cols = _IDENTITY[c.is_m2c]
        id_col = "test_id" if c.is_m2c else "pair_id"
        before = {r[id_col]: tuple(r[k] for k in cols) for r in old.select([id_col, *cols]).to_pylist()}
        by_key = {v: k for k, v in before.items()}
        now_ids = set()
        for i, item in enumerate(c.ids()):
            now_ids.add(item)
            key = tuple(c.columns[k][i] for k in cols)
            if item in before and before[item] != key:
                problems.append(f"{name} {item}: was {before[item]} in {parent}, now {key}")
            elif item not in before and key in by_key:
                problems.append(f"{name}: {key} had id {by_key[key]} in {parent}, now {item}")
        removed += len(set(before) - now_ids)
    summary = (f"{len(problems)} id(s) changed meaning since {parent}" if problems
               else f"ids agree with {parent}; {removed} item(s) of {parent} not in this release")
    return CheckResult(name="stable ids", ok=not problems, summary=summary, problems=problems)


def _coverage(configs: dict[str, ConfigRows], excluded: dict[str, int], require_complete: bool) -> tuple[CheckResult, list[Coverage]]:
    pair_sets = {name: set(c.ids()) for name, c in configs.items() if not c.is_m2c}
    union = set().union(*pair_sets.values()) if pair_sets else set()
    coverage, problems = [], []
    for name in sorted(set(configs) | set(excluded)):
        c = configs.get(name)
        status = defaultdict(int)
        if c is not None and not c.is_m2c:
            for s in c.columns["review_status"]:
                status[s] += 1
        elif c is not None:
            status["verified"] = len(c) - len(c.waived)
            status["waived"] = len(c.waived)
        missing = len(union - pair_sets.get(name, set())) if not name.startswith("m2c_") else 0
        if missing:
            problems.append(f"{name} lacks {missing} of {len(union)} pairs")
        coverage.append(Coverage(config=name, rows=len(c) if c else 0, verified=status["verified"], waived=status["waived"],
                                 source=status["source"], excluded=excluded.get(name, 0), missing=missing))
    ok = not (require_complete and problems)
    summary = (f"{len(pair_sets)} language(s), {len(union)} pairs in all; "
               + ("every language has every pair" if not problems else f"{len(problems)} language(s) incomplete")
               + (" (required complete)" if require_complete else ""))
    return CheckResult(name="coverage", ok=ok, summary=summary, problems=problems if require_complete else []), coverage


def run_checks(configs: dict[str, ConfigRows], *, previous: dict[str, pa.Table] | None = None, parent: str | None = None,
               require_complete: bool = False, exclude_unverified: bool = False,
               audits: AuditFlags | None = None) -> tuple[CheckReport, dict[str, ConfigRows]]:
    """The report, and the rows that would be released (unverified ones dropped if asked)."""
    verified, kept, excluded = _verified(configs, exclude_unverified)
    coverage_check, coverage = _coverage(kept, excluded, require_complete)
    checks = [verified, _integrity(kept), _audits(kept, audits or AuditFlags()), _duplicates(kept),
              _stable(kept, previous, parent), coverage_check]
    return CheckReport(checks=checks, coverage=coverage), kept
