"""Release checks: run before anything is written; any failure stops the release with this report.

Checks: every released item verified by a curator or waived with a reason (sentences a curator left that
are no minimal pair wait as unverified items do, with the reason); minimal-pair integrity; the pair audits,
by the audits' own rules on each pair as it would be released (each concept named once, in its own
sentence; both sentences in the language's declared script), and every open flag of the occurrence and
script audits and of the LLM judge, unless the pair is waived
(negative types that the concept similarities contradict are counted, not failed); no duplicate ids (or
duplicate items under two ids); ids stable against the previous release; and per-language coverage: the
rows each config releases, and the pairs each language lacks with why and the command that gets them in.
Coverage fails when a language would be left out altogether, and when every language is required to have
every pair and one does not.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace

import pyarrow as pa
from pydantic import BaseModel

from builder.audits import occurrence
from builder.errors import BuilderError
from builder.records import Language
from builder.releases.features import M2C_PREFIX
from builder.releases.rows import FIX_IN_LABEL_STUDIO, ConfigRows
from builder.scripts import pair_outside_script

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
    missing: int  # pairs some language has (or was asked for) that this one does not release (minimal-pair configs only)
    unwritten: int = 0  # of those, pairs the LLM could not write and no curator has written yet


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
        lines.append("  coverage (released rows: verified / waived / source; excluded; missing pairs, not written of them):")
        for cov in self.coverage:
            lines.append(f"    {cov.config:>8}: {cov.rows} ({cov.verified} / {cov.waived} / {cov.source}); "
                         f"excluded {cov.excluded}; missing {cov.missing}, not written {cov.unwritten}")
        return "\n".join(lines)


class ReleaseCheckError(BuilderError):
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
        elif (sa[:a0], sa[a1:]) != (su[:u0], su[u1:]):  # the frame with its gap, as `builder.integrity.frame`
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
                    and (sa[:a0], sa[a1:]) == (su[:u0], su[u1:]) and (ps is None or 0 <= ps[0] < ps[1] <= len(sa)))
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

    languages: dict[str, Language] = field(default_factory=dict)  # code -> its declaration (script, spacing)
    open: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)  # (pair id, lang) -> audit stage -> reason
    similarity: dict[str, str] = field(default_factory=dict)  # pair id -> open similarity flag
    waived: dict[tuple[str, str], str] = field(default_factory=dict)  # (pair id, lang) -> the waiver's reason and who


# The audits whose open flags hold a pair back, and what clears each flag.
BLOCKING = {"occurrence": "the pair as released no longer shows it: run `builder audit -l {lang}` to clear the flag",
            "script": "the pair as released no longer shows it: run `builder audit -l {lang}` to clear the flag",
            "judge": "a curator decides the verdict (`builder review push --stage judge -l {lang}`)"}
# What to do about a pair whose released sentences are not in the language's script.
OUTSIDE_SCRIPT = ("a curator corrects the sentences in Label Studio (`builder review push --stage sentences -l {lang}`, "
                  "then `builder review pull`)")
WAIVE = "or waive the pair (`builder releases waive {pid} -l {lang} --reason … --by …`)"


def _audits(configs: dict[str, ConfigRows], flags: AuditFlags) -> CheckResult:
    """Each pair as it would be released, under the audits' own rules, and every open audit flag on it: a finding
    holds the pair back unless it is waived."""
    problems, waived = [], []
    similar = 0
    for c in configs.values():
        if c.is_m2c:
            continue
        col = c.columns
        lang = flags.languages.get(c.lang)
        spaced, script = (lang.spaced, lang.script) if lang else (True, "Latn")
        rows = zip(c.ids(), col["acceptable_sentence"], col["unacceptable_sentence"], col["acceptable_concept"],
                   col["unacceptable_concept"], c.concept_spans, c.concept_forms)
        for pid, sa, su, wa, wu, (a0, a1, u0, u1), (fa, fu) in rows:
            key = (pid, c.lang)
            similar += c.lang == "en" and pid in flags.similarity
            # The occurrence audit's rule on the pair as it would be released (missing spans: the integrity check's)
            found = [] if None in (a0, a1, u0, u1) else occurrence.problems(
                occurrence.Side(sa, (a0, a1), occurrence.names(wa, fa)),
                occurrence.Side(su, (u0, u1), occurrence.names(wu, fu)), spaced=spaced, script=script)
            recomputed = {"occurrence": bool(found)}
            if lang and (outside := pair_outside_script(sa, su, lang)):
                found.append(f"{outside}; {OUTSIDE_SCRIPT.format(lang=c.lang)}")
                recomputed["script"] = True
            for stage, why in flags.open.get(key, {}).items():
                if recomputed.get(stage):
                    continue  # the same finding, made again on the released sentences
                found.append(f"{why} (an open {stage} flag); {BLOCKING[stage].format(lang=c.lang)}")
            if not found:
                continue
            if key in flags.waived:
                waived.append(f"{c.config} {pid}: waived ({flags.waived[key]})")
            else:
                problems.append(f"{c.config} {pid}: {'; '.join(found)}; {WAIVE.format(pid=pid, lang=c.lang)}")
    summary = (f"{len(problems)} pair(s) with findings: fix them, settle the flags as each says, or waive them"
               if problems else "each concept named once, in its own sentence and script; no open flag of the occurrence "
               "or script audit or the LLM judge")
    if waived:
        summary += f"; {len(waived)} finding(s) waived: " + "; ".join(waived[:SHOWN]) + ("; …" if len(waived) > SHOWN else "")
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


def _lacking(name: str, lacks: int, union: int, c: ConfigRows | None, excluded: int) -> str:
    """Why a language lacks pairs, and the command that gets each kind of them into a release."""
    lang = c.lang if c else name
    unwritten = len(c.unwritten) if c else 0
    why = [f"{unwritten} flagged by the LLM and not written by a curator (`builder review push --stage sentences -l {lang}`)"
           if unwritten else "",
           f"{excluded} unverified left out (--exclude-unverified)" if excluded else "",
           f"{lacks - unwritten - excluded} not generated (`builder generate -l {lang}`)" if lacks > unwritten + excluded else ""]
    return f"{name} lacks {lacks} of {union} pairs: " + "; ".join(w for w in why if w)


def _coverage(configs: dict[str, ConfigRows], kept: dict[str, ConfigRows], excluded: dict[str, int],
              require_complete: bool, languages: list[str]) -> tuple[CheckResult, list[Coverage]]:
    """Per config, the rows that will be released; per language, the pairs it lacks and why. A language left out
    altogether (nothing to release, or nothing left of it) fails, whatever is required."""
    pairs = {name: c for name, c in configs.items() if not c.is_m2c}
    union = set().union(*(set(c.ids()) | set(c.unwritten) for c in pairs.values()))
    coverage, incomplete, left_out = [], [], []
    released = {c.lang for c in kept.values()}
    for lang in sorted({c.lang for c in configs.values()} | set(languages)):
        if lang in released:
            continue
        c = pairs.get(lang)
        m2c = configs.get(M2C_PREFIX + lang)
        what = (_lacking(lang, len(union), len(union), c, excluded.get(lang, 0)) if c is not None
                else f"all {len(m2c)} M2C tests left out as unverified" if m2c is not None
                else "nothing to release (no sentence pairs or M2C tests)")
        left_out.append(f"{lang} would be left out: {what} (or leave it out with --lang)")
        if c is None and m2c is None:
            coverage.append(Coverage(config=lang, rows=0, verified=0, waived=0, source=0, excluded=0, missing=len(union)))
    for name in sorted(configs):
        c, every = kept.get(name), configs[name]
        status = defaultdict(int)
        if c is not None and not c.is_m2c:
            for s in c.columns["review_status"]:
                status[s] += 1
        elif c is not None:
            status["verified"] = len(c) - len(c.waived)
            status["waived"] = len(c.waived)
        missing = 0 if every.is_m2c else len(union - set(c.ids() if c else ()))
        if missing and c is not None:
            incomplete.append(_lacking(name, missing, len(union), every, excluded.get(name, 0)))
        coverage.append(Coverage(config=name, rows=len(c) if c else 0, verified=status["verified"], waived=status["waived"],
                                 source=status["source"], excluded=excluded.get(name, 0), missing=missing,
                                 unwritten=len(every.unwritten)))
    ok = not left_out and not (require_complete and incomplete)
    summary = (f"{len({c.lang for c in kept.values() if not c.is_m2c})} language(s), {len(union)} pairs in all; "
               + ("every language has every pair" if not incomplete and not left_out
                  else ", ".join(filter(None, [f"{len(left_out)} language(s) left out" if left_out else "",
                                               f"{len(incomplete)} language(s) incomplete" if incomplete else ""])))
               + (" (required complete)" if require_complete else ""))
    return CheckResult(name="coverage", ok=ok, summary=summary, problems=left_out + incomplete), coverage


def _curated_problems(configs: dict[str, ConfigRows]) -> dict[str, ConfigRows]:
    """Rows whose sentences a curator left that fail the integrity check wait, with the reason, as unverified rows do:
    the curator corrects them, or they are left out (--exclude-unverified); the release does not fail for them."""
    out = {}
    for name, c in configs.items():
        found = {i: f"the curator's sentences are no minimal pair ({'; '.join(p)}); {FIX_IN_LABEL_STUDIO.format(lang=c.lang)}"
                 for i in sorted(c.curated) if i not in c.unverified and (p := _pair_problems(c, i))}
        out[name] = replace(c, unverified={**c.unverified, **found}) if found else c
    return out


def run_checks(configs: dict[str, ConfigRows], *, previous: dict[str, pa.Table] | None = None, parent: str | None = None,
               require_complete: bool = False, exclude_unverified: bool = False,
               audits: AuditFlags | None = None, languages: list[str] = ()) -> tuple[CheckReport, dict[str, ConfigRows]]:
    """The report, and the rows that would be released (unverified ones dropped if asked; empty configs never).
    `languages`: those asked for, each of which coverage reports even when it has nothing to release."""
    configs = _curated_problems(configs)
    verified, kept, excluded = _verified(configs, exclude_unverified)
    kept = {name: c for name, c in kept.items() if len(c)}
    coverage_check, coverage = _coverage(configs, kept, excluded, require_complete, list(languages))
    checks = [verified, _integrity(kept), _audits(kept, audits or AuditFlags()), _duplicates(kept),
              _stable(kept, previous, parent), coverage_check]
    return CheckReport(checks=checks, coverage=coverage), kept
