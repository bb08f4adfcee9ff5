"""Inflection tables in the workspace: UniMorph import, LLM proposals, verification, and lexemes for templates.

The one module that writes `lexicon_forms`.

Every form is one row per (language, lemma, part of speech, feature bundle). Bundles are stored in
the language's dimension order ("SG.GEN", never "GEN.SG"), so a template's bundle finds its row
however either was written. Forms come from UniMorph files (a curated resource: verified on import
unless asked otherwise) or from the LLM (proposed, until a curator verifies them).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Connection, select

from builder.errors import BuilderError, InputError
from builder.flags import clear_flags
from builder.inputs import NAME_CHARS, text_problem
from builder.languages import registry
from builder.m2c.errors import LanguageDataError, TemplateError
from builder.m2c.language import Grammar, available, load_language, unimorph_language, unimorph_schema
from builder.m2c.nodes import Lexeme
from builder.m2c.template_files import LexiconRef
from builder.workspace import schema as t
from builder.workspace.store import Workspace, now, upsert_ignore


class NoLexemes(TemplateError):
    """A lexicon reference none of whose lemmas has every bundle it needs (yet)."""


class LexiconImportError(BuilderError, ValueError):
    """A UniMorph file that cannot be imported; names the file, line and field. Nothing was written."""


def lemma_id(lang: str, lemma: str) -> str:
    """A lemma's item id in a language: what fills ask the LLM for, curators review, and flags name."""
    return "l_" + hashlib.blake2b(f"{lang}\x1f{lemma}".encode(), digest_size=6).hexdigest()


def canonical_bundle(lang: Grammar, bundle: str) -> str:
    """A bundle in the language's dimension order; raises LanguageDataError on an unknown feature."""
    feats = lang.dims.bundle(bundle, what=f"bundle {bundle!r}")
    return ".".join(feats[d] for d in lang.dims.sort(feats))


@dataclass
class ImportSummary:
    """What an import did, and what it made of labels outside the language's dimensions: `mapped` ("PRES -> PRS"),
    `kept` (as the file's own features) and `ignored` (the language file's ignore list), each with its count of lines."""

    lines: int = 0
    new: int = 0
    existing: int = 0
    variants: int = 0  # a second form for a bundle already given by an earlier line (kept the first)
    mapped: Counter[str] = field(default_factory=Counter)
    kept: Counter[str] = field(default_factory=Counter)
    ignored: Counter[str] = field(default_factory=Counter)


# UniMorph 4's layered features: a possessor PSS(2,SG,MASC) or an argument NOM(3,SG), which schema 3 writes flat.
_LAYERED = re.compile(r"(?P<layer>PSS|NOM|ACC|ABS|ERG|DAT|BEN)\((?P<person>[0-9])(?:,(?P<number>SG|DU|PL))?"
                      r"(?:,(?P<gender>MASC|FEM))?\)")
_FLAT = {"PSS": "PSS", "NOM": "NO", "ACC": "AC", "ABS": "AB", "ERG": "ER", "DAT": "DA", "BEN": "BE"}
KEPT = "|"  # between a bundle and the file's own features: "SG.3.PST|LGSPEC1.SUBJ"


def _flat(label: str) -> str:
    """The schema's flat label for a layered one (PSS(2,SG,MASC) -> PSS2SM, NOM(3,SG) -> NO3S) where the schema has
    it; anything else unchanged."""
    if m := _LAYERED.fullmatch(label):
        flat = _FLAT[m["layer"]] + m["person"] + (m["number"] or "")[:1] + (m["gender"] or "")[:1]
        if any(flat in d.features for d in unimorph_schema().dimensions):
            return flat
    return label


def _unimorph_features(lang: Grammar, raw: str, summary: ImportSummary, *, strict: bool) -> tuple[str, str]:
    """(pos, bundle) of a UniMorph feature string such as "N;ACC;PL": labels mapped by the language file, then by
    UniMorph's own other spellings; ignored where the language file says so; a label that is still no feature of a
    dimension, or a second feature of one (real files have IND;COND), is kept after the bundle (`KEPT`), so that forms
    that differ only in it stay apart (refused if `strict`)."""
    schema = unimorph_schema()
    pos, labels, kept, dims = "", [], set(), set()
    for given in dict.fromkeys(x.strip() for x in raw.split(";") if x.strip()):  # a label repeated counts once
        label = lang.unimorph_map.get(given) or schema.aliases.get(given) or _flat(given)
        if label != given:
            summary.mapped[f"{given} -> {label}"] += 1
        if given in lang.unimorph_ignore or label in lang.unimorph_ignore:
            summary.ignored[given] += 1
        elif label in schema.parts_of_speech and label not in lang.dims.of_feature:
            if pos and not (label.startswith(pos + ".") or pos.startswith(label + ".")):
                raise LanguageDataError(f"two parts of speech ({pos}, {label})")
            pos = max(pos, label, key=len)  # V;V.PTCP: the participle
        elif label in lang.dims.of_feature and lang.dims.of_feature[label] not in dims:
            labels.append(label)
            dims.add(lang.dims.of_feature[label])
        elif strict:
            what = (f"a second feature of {lang.dims.of_feature[label]}" if label in lang.dims.of_feature else
                    f"not a dimension of {lang.name} nor a UniMorph feature")
            raise LanguageDataError(f"feature {given!r} is {what} (map it or ignore it under unimorph: in "
                                    f"data/m2c/languages/{lang.code}.yaml, or import without --strict to keep it as the "
                                    "file's own feature)")
        else:
            summary.kept[given] += 1
            kept.add(given)
    bundle = canonical_bundle(lang, ".".join(labels))
    return pos, bundle + (KEPT + ".".join(sorted(kept)) if kept else "")


def import_unimorph(ws: Workspace, path: Path, lang_code: str, *, verified: bool = True, strict: bool = False,
                    reviewer: str = "UniMorph") -> ImportSummary:
    """Import `lemma<TAB>form<TAB>features` lines for any declared language (or one with an M2C language
    file); any malformed line (columns, an empty field, two parts of speech) fails the whole file, naming file:line:field. Features are UniMorph's universal labels, read through the
    language's M2C file when it has one (`unimorph_language`); what is made of other labels is in the summary."""
    declared = registry(ws)
    try:
        if lang_code in declared:
            lang = unimorph_language(lang_code, declared[lang_code].name)
        elif lang_code in available():
            lang = unimorph_language(lang_code, load_language(lang_code).name)
        else:
            raise LexiconImportError(f"{path}: unknown language {lang_code!r}; declare it first (`builder language add`)")
    except LanguageDataError as exc:
        raise LexiconImportError(str(exc)) from exc
    summary = ImportSummary()
    rows: dict[tuple[str, str, str], dict] = {}
    ts = now()
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        summary.lines += 1
        fields = line.split("\t")
        if len(fields) not in (3, 4):
            raise LexiconImportError(f"{path}:{no}: expected lemma<TAB>form<TAB>features, got {len(fields)} field(s)")
        lemma, form, feats = (f.strip() for f in fields[:3])
        for i, (name, value) in enumerate((("lemma", lemma), ("form", form), ("features", feats)), start=1):
            if not value:
                raise LexiconImportError(f"{path}:{no}: field {i} ({name}) is empty")
            # A word may hold a zero-width (non-)joiner (Persian, Hindi), so not a name's check: no control character.
            if problem := text_problem(value, limit=NAME_CHARS):
                raise LexiconImportError(f"{path}:{no}: field {i} ({name}) {problem}")
        try:
            pos, bundle = _unimorph_features(lang, feats, summary, strict=strict)
        except LanguageDataError as exc:
            raise LexiconImportError(f"{path}:{no}: field 3 (features {feats!r}): {exc}") from exc
        key = (lemma, pos, bundle)
        if key in rows:
            summary.variants += 1
            continue
        rows[key] = dict(lang=lang.code, lemma=lemma, pos=pos, features=bundle, form=form,
                         status="verified" if verified else "proposed", source=f"unimorph:{path.name}:{no}",
                         reviewer=reviewer if verified else None, comment="", verified_at=ts if verified else None,
                         created_at=ts)
    with ws.transaction() as conn:
        summary.new = ws.upsert_ignore(conn, t.lexicon_forms, list(rows.values()))
        clear_flags(conn, "fill", lang.code, {lemma_id(lang.code, r["lemma"]) for r in rows.values()})  # written by hand
    summary.existing = len(rows) - summary.new
    return summary


@dataclass
class VerifySummary:
    verified: int = 0
    corrected: int = 0
    rejected: int = 0
    already: int = 0
    unknown: list[str] = field(default_factory=list)


def verify_fills(ws: Workspace, lang_code: str, lemma: str, *, reviewer: str, decision: str = "accept",
                 forms: dict[str, str] | None = None, pos: str | None = None, comment: str = "") -> VerifySummary:
    """A curator's decision on a lemma's proposed forms: accept them, fix some (`forms`: bundle -> form,
    the rest accepted), or reject them all. One transaction; the LLM's draft stays in `proposed_form`."""
    if decision not in ("accept", "fix", "reject"):
        raise InputError(f"decision must be accept, fix or reject, not {decision!r}")
    lang = load_language(lang_code)
    fixes = {canonical_bundle(lang, b): f.strip() for b, f in (forms or {}).items()}
    stmt = select(t.lexicon_forms).where(t.lexicon_forms.c.lang == lang.code, t.lexicon_forms.c.lemma == lemma)
    if pos is not None:
        stmt = stmt.where(t.lexicon_forms.c.pos == pos)
    rows = {r["features"]: r for r in ws.rows(stmt)}
    summary = VerifySummary(unknown=sorted(set(fixes) - set(rows)))
    if summary.unknown:
        raise InputError(f"{lang.code} {lemma}: no proposed form for {', '.join(summary.unknown)}")
    ts = now()
    with ws.transaction() as conn:
        for bundle, row in rows.items():
            if row["status"] == "verified" and bundle not in fixes:
                summary.already += 1
                continue
            if decision == "reject":
                values = dict(status="rejected", reviewer=reviewer, comment=comment, verified_at=None)
                summary.rejected += 1
            elif bundle in fixes and fixes[bundle] != row["form"]:
                if not fixes[bundle]:
                    raise InputError(f"{lang.code} {lemma} {bundle}: the corrected form is empty")
                values = dict(status="verified", form=fixes[bundle], proposed_form=row["proposed_form"] or row["form"],
                              reviewer=reviewer, comment=comment, verified_at=ts)
                summary.corrected += 1
            else:
                values = dict(status="verified", reviewer=reviewer, comment=comment, verified_at=ts)
                summary.verified += 1
            conn.execute(t.lexicon_forms.update().where(t.lexicon_forms.c.id == row["id"]).values(**values))
    return summary


def withdraw_fills(ws: Workspace, lang_code: str, lemma: str) -> int:
    """Put a lemma's decided LLM forms back as the LLM proposed them, waiting for review: the decision that
    verified or rejected them no longer holds (its curators now disagree, or its annotation was deleted).
    Forms from elsewhere (UniMorph) stay. One transaction; returns how many forms went back."""
    c = t.lexicon_forms.c
    with ws.transaction() as conn:
        rows = conn.execute(select(c.id, c.form, c.proposed_form).where(
            c.lang == lang_code, c.lemma == lemma, c.pos == "", c.source == "llm", c.status.in_(("verified", "rejected")))).all()
        for r in rows:
            conn.execute(t.lexicon_forms.update().where(c.id == r.id).values(
                status="proposed", form=r.proposed_form or r.form, proposed_form=None, reviewer=None, comment="",
                verified_at=None))
    return len(rows)


def store_proposed_forms(conn: Connection, lang: str, lemma: str, forms: dict[str, str], call_id: str) -> int:
    """The LLM's forms for a lemma (bundle -> form), stored as proposed with their call, in the caller's
    transaction; a bundle already proposed or verified is never stored twice (nor when workers on one workspace
    store one reply at once), a rejected one is proposed afresh. Returns how many were stored."""
    ts = now()
    stored = 0
    c = t.lexicon_forms.c
    existing = {r.features: r for r in conn.execute(select(t.lexicon_forms).where(c.lang == lang, c.lemma == lemma, c.pos == ""))}
    for bundle, form in forms.items():
        values = dict(form=form, status="proposed", source="llm", llm_call_id=call_id, proposed_form=None,
                      reviewer=None, comment="", verified_at=None, created_at=ts)
        old = existing.get(bundle)
        if old is None:
            stored += upsert_ignore(conn, t.lexicon_forms, [dict(lang=lang, lemma=lemma, pos="", features=bundle, **values)])
        elif old.status == "rejected":
            conn.execute(t.lexicon_forms.update().where(c.id == old.id).values(**values))
            stored += 1
    return stored


def forms_of(ws: Workspace, lang: str, lemmas: Iterable[str], pos: str | None = None) -> dict[str, dict[str, dict]]:
    """lemma -> bundle -> row (rejected rows included; callers decide)."""
    stmt = select(t.lexicon_forms).where(t.lexicon_forms.c.lang == lang, t.lexicon_forms.c.lemma.in_(list(lemmas)))
    if pos:
        stmt = stmt.where(t.lexicon_forms.c.pos == pos)
    out: dict[str, dict[str, dict]] = {}
    for r in ws.rows(stmt.order_by(t.lexicon_forms.c.id)):
        out.setdefault(r["lemma"], {}).setdefault(r["features"], r)
    return out


@dataclass
class Resolution:
    """What lexicon references resolved to: lemmas used, and lemmas left out for want of forms."""

    used: int = 0
    waiting: dict[str, list[str]] = field(default_factory=dict)  # "lang lemma" -> missing bundles


def resolver(ws: Workspace, *, include_unverified: bool = False, report: Resolution | None = None):
    """A template-file resolver: lexemes with every bundle the reference asks for; verified forms only
    unless `include_unverified` (then proposed forms come marked unverified)."""

    def resolve(ref: LexiconRef) -> list[Lexeme]:
        lang = load_language(ref.lang)
        try:
            bundles = [canonical_bundle(lang, b) for b in ref.bundles]
        except LanguageDataError as exc:
            raise TemplateError(str(exc), ref.where) from exc
        table = forms_of(ws, lang.code, ref.lemmas)
        lexemes = []
        for lemma, feats in ref.lemmas.items():
            rows = table.get(lemma, {})
            ok = {b: rows[b] for b in bundles if b in rows and (rows[b]["status"] == "verified" or
                                                                 (include_unverified and rows[b]["status"] == "proposed"))}
            missing = [b for b in bundles if b not in ok]
            if missing:
                if report is not None:
                    report.waiting[f"{lang.code} {lemma}"] = missing
                continue
            lexemes.append(Lexeme({b: r["form"] for b, r in ok.items()}, lemma=lemma, features=feats,
                                  unverified=frozenset(b for b, r in ok.items() if r["status"] != "verified")))
            if report is not None:
                report.used += 1
        if not lexemes:
            raise NoLexemes(f"no lemma of this placeholder has all of {', '.join(bundles)} "
                                f"{'proposed or verified' if include_unverified else 'verified'} in the {lang.code} lexicon "
                                f"(run `builder templates fill --lang {lang.code}` with the templates rendered here, then "
                                "verify the forms)", ref.where)
        return lexemes

    return resolve


def list_forms(ws: Workspace, lang: str, *, lemma: str | None = None, status: str | None = None) -> list[dict]:
    """The lexicon's rows for a language (optionally one lemma, one status), by lemma and bundle."""
    c = t.lexicon_forms.c
    stmt = select(t.lexicon_forms).where(c.lang == lang)
    if lemma:
        stmt = stmt.where(c.lemma == lemma)
    if status:
        stmt = stmt.where(c.status == status)
    return ws.rows(stmt.order_by(c.lemma, c.features))
