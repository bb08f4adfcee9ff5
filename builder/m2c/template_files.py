"""Template files: `data/templates/<lang>/<capability>.yaml` -> test templates -> M2C tests.

A file holds shared placeholders and a list of templates, each with its test type (`id`: the M2C
paper's Table 4 names, e.g. `in-question`, `position`, or a language-specific one), context, question,
answer, optional alternatives (more accepted answers; `re:` marks a regular expression; one that names a
form some fills' values lack is left out of those fills, so that a near-synonym with its own case is accepted
only where it fits), options and a sample size `n`. Placeholder values are inline (strings, or mappings of feature bundle -> form) or
lexicon references resolved from the workspace:

    place:
      lexicon: {bundles: [NOM.SG, GEN.SG], lemmas: {pöytä: "", tuoli: ""}}   # lemma -> lexeme features

`dimensions:` adds the file's own dimensions to the language's, for what only its templates need: a
constraint (which things an adjective fits: a feature of the thing that the adjective's forms require,
so that a fill an adjective cannot serve never exists) or the forms of an accepted variant.

Errors name the file, line and column, also inside block scalars. Every string in a file (keys and
values) is checked first as any user-supplied text is (`builder.inputs`: control characters, which a
double-quoted YAML string can write as `\0`, and length).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

from builder.inputs import yaml_text_problem
from builder.m2c.engine import Template
from builder.m2c.errors import LanguageDataError, TemplateError, Where
from builder.m2c.language import Grammar, available, load_language, with_dimensions
from builder.m2c.nodes import Lexeme
from builder.m2c.syntax import Locate
from builder.paths import data_dir

FIELDS = ("context", "question", "answer")
# The language-agnostic test types of the M2C paper (its Table 4), by capability.
PAPER_TEST_TYPES: dict[str, tuple[str, str]] = {
    "negation": ("in-context", "in-question"),
    "numerals": ("addition", "subtraction"),
    "spatial": ("prepositions", "position"),
    "temporal": ("past", "future"),
    "comparatives": ("standard", "conditional"),
}
TEMPLATE_KEYS = {"id", "context", "question", "answer", "alternatives", "n", "options", "placeholders"}
FILE_KEYS = {"language", "capability", "placeholders", "dimensions", "templates"}


class M2CTest(BaseModel):
    """One rendered test: the row of the `m2c_tests` workspace table."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    test_id: str
    lang: str
    capability: str
    template_id: str
    context: str
    question: str
    answer: str
    alternatives: list[str]
    answer_forms: list[str]
    fills: dict[str, dict]
    verified: bool


@dataclass(frozen=True)
class LexiconRef:
    """Lemmas to take from the workspace lexicon, with the feature bundles the template needs."""

    lang: str
    bundles: tuple[str, ...]
    lemmas: dict[str, str]  # lemma -> features of the lexeme (e.g. "MASC")
    where: Where


Resolver = Callable[[LexiconRef], list[Lexeme]]


def template_type(template_id: str) -> str:
    """A template's test type: its id ("en/spatial#position" -> "position")."""
    return template_id.rsplit("#", 1)[-1]


def test_id(lang: str, template_id: str, context: str, question: str, answer: str) -> str:
    return "m_" + hashlib.blake2b("\x1f".join((lang, template_id, context, question, answer)).encode(), digest_size=12).hexdigest()


@dataclass
class TestTemplate:
    template_id: str
    lang: str
    capability: str
    template: Template
    alternatives: tuple[str, ...]
    n: int
    language: Grammar
    regexes: tuple[str, ...] = ()  # accepted answers given as `re:<pattern>`

    def tests(self, n: int | None = None, seed: int = 0) -> Iterator[M2CTest]:
        from builder.m2c.answers import match_key

        for fill in self.template.fills(self.n if n is None else n, seed, variants=("answer",),
                                        accepted=("answer", *self.alternatives)):
            texts = fill.texts
            right = [texts[a] for a in self.alternatives if a in texts] + [x for f in fill.accepted_forms.values() for x in f]
            accepted = {match_key(texts["answer"], self.language): texts["answer"]}
            for x in right:  # an alternative that normalises like the answer or an earlier one adds nothing
                accepted.setdefault(match_key(x, self.language), x)
            alternatives = list(accepted.values())[1:] + list(self.regexes)
            forms = [f for f in fill.other_forms.get("answer", []) if match_key(f, self.language) not in accepted]
            yield M2CTest(
                test_id=test_id(self.lang, self.template_id, texts["context"], texts["question"], texts["answer"]),
                lang=self.lang, capability=self.capability, template_id=self.template_id,
                context=texts["context"], question=texts["question"], answer=texts["answer"],
                alternatives=alternatives, answer_forms=list(dict.fromkeys(forms)), fills=fill.values,
                verified=fill.verified,
            )


def templates_dir() -> Path:
    return data_dir() / "templates"


def template_files(lang: str, root: Path | None = None) -> list[Path]:
    return sorted(((root or templates_dir()) / lang).glob("*.yaml"))


def _locator(node: yaml.ScalarNode, value: str, path: str, lines: list[str], field_name: str) -> Locate:
    """Offsets in a scalar's value -> file positions, for plain, quoted, literal and folded scalars."""
    start = node.start_mark
    if node.style in ("|", ">"):
        first = start.line + 1
        while first < len(lines) and not lines[first].strip():
            first += 1
        indent = len(lines[first]) - len(lines[first].lstrip()) if first < len(lines) else 0
        spans = [(first, indent)]
    else:
        spans = [(start.line, start.column + (1 if node.style in ("'", '"') else 0))]
        first, indent = start.line + 1, None
    row = spans[0][0] + 1
    while row < len(lines) and row <= node.end_mark.line:  # continuation lines of the scalar
        text = lines[row]
        spans.append((row, indent if indent is not None else len(text) - len(text.lstrip())))
        row += 1

    def locate(offset: int) -> Where:
        # each source line holds its characters plus one separator (newline or folding space)
        pos = offset
        for line_no, col0 in spans:
            length = len(lines[line_no]) - col0 if line_no < len(lines) else 0
            if pos <= length:
                return Where(path, line_no + 1, col0 + pos + 1, field_name)
            pos -= length + 1
        return Where(path, spans[-1][0] + 1, spans[-1][1] + 1, field_name)

    return locate


def _child(node: yaml.Node, key: Any) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if k.value == key:
                return v
    if isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
        return node.value[key]
    return None


def _where(node: yaml.Node | None, path: str) -> Where | None:
    return Where(path, node.start_mark.line + 1, node.start_mark.column + 1) if node is not None else None


def _values(name: str, raw: Any, node: yaml.Node, path: str, lang: str, resolve: Resolver | None) -> list:
    where = _where(node, path)
    if isinstance(raw, dict) and "lexicon" in raw:
        spec = raw["lexicon"] or {}
        lemmas = spec.get("lemmas")
        bundles = spec.get("bundles")
        if not lemmas or not bundles:
            raise TemplateError(f"placeholder {name}: a lexicon reference needs lemmas and bundles", where)
        if isinstance(lemmas, list):
            lemmas = {str(x): "" for x in lemmas}
        if resolve is None:
            raise TemplateError(f"placeholder {name} takes its forms from a workspace lexicon; render it with a workspace", where)
        return resolve(LexiconRef(lang, tuple(str(b) for b in bundles), {str(k): str(v or "") for k, v in lemmas.items()}, where))
    if not isinstance(raw, list) or not raw:
        raise TemplateError(f"placeholder {name}: give a list of values or a lexicon reference", where)
    out = []
    for i, v in enumerate(raw):
        if isinstance(v, dict) and "forms" in v:
            extra = set(v) - {"forms", "lemma", "features"}
            if extra:
                raise TemplateError(f"placeholder {name}, value #{i + 1}: unknown keys {sorted(extra)}", _where(_child(node, i), path))
            out.append(Lexeme({str(k): str(f) for k, f in v["forms"].items()}, v.get("lemma"), str(v.get("features") or "")))
        elif isinstance(v, dict):
            out.append({str(k): str(f) for k, f in v.items()})
        elif isinstance(v, bool):
            raise TemplateError(f"placeholder {name}, value #{i + 1}: YAML read a boolean; quote the word (e.g. \"on\")",
                                _where(_child(node, i), path))
        elif isinstance(v, (str, int, float)):
            out.append(str(v))
        else:
            raise TemplateError(f"placeholder {name}, value #{i + 1}: a string or a mapping", _where(_child(node, i), path))
    return out


def _check_text(node: yaml.Node | None, path: str) -> None:
    """Every scalar of the document passes `inputs.text_problem`, or a `TemplateError` says where."""
    if found := yaml_text_problem(node):
        raise TemplateError(found[1], _where(found[0], path))


def load_file(path: Path, *, resolve: Resolver | None = None, lang: str | None = None) -> list[TestTemplate]:
    """The test templates of one file; `resolve` turns lexicon references into lexemes."""
    shown = str(path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = Where(shown, data[: exc.start].count(b"\n") + 1, exc.start - data.rfind(b"\n", 0, exc.start))
        raise TemplateError(f"not valid UTF-8: {exc.reason}", where) from exc
    try:
        root = yaml.compose(text)
        _check_text(root, shown)
        raw = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = Where(shown, mark.line + 1, mark.column + 1) if mark else Where(shown, 1, 1)
        raise TemplateError(f"not valid YAML: {getattr(exc, 'problem', exc)}", where) from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("templates"), list):
        raise TemplateError("a template file is a mapping with a list under 'templates'", Where(shown, 1, 1))
    if set(raw) - FILE_KEYS:
        raise TemplateError(f"unknown keys {sorted(set(raw) - FILE_KEYS)} (known: {', '.join(sorted(FILE_KEYS))})",
                            _where(_child(root, sorted(set(raw) - FILE_KEYS)[0]), shown))
    lang = raw.get("language") or lang or path.parent.name
    capability = raw.get("capability") or path.stem
    if lang not in available():
        raise TemplateError(f"no M2C language data for language {lang!r} (have: {', '.join(available())})",
                            _where(_child(root, "language"), shown) or Where(shown, 1, 1))
    if not isinstance(capability, str):
        raise TemplateError(f"capability {capability!r} is not a name", _where(_child(root, "capability"), shown))
    language = load_language(lang)
    if raw.get("dimensions"):
        try:
            language = with_dimensions(language, raw["dimensions"])
        except LanguageDataError as exc:
            raise TemplateError(str(exc), _where(_child(root, "dimensions"), shown)) from exc
    lines = text.splitlines()
    shared_node = _child(root, "placeholders")
    shared = {k: _values(k, v, _child(shared_node, k), shown, lang, resolve) for k, v in (raw.get("placeholders") or {}).items()}
    shared_where = {k: _where(_child(shared_node, k), shown) for k in shared}
    out = []
    seen: set[str] = set()
    templates_node = _child(root, "templates")
    for i, entry in enumerate(raw["templates"]):
        node = _child(templates_node, i)
        where = _where(node, shown)
        if not isinstance(entry, dict):
            raise TemplateError("each template is a mapping", where)
        unknown = set(entry) - TEMPLATE_KEYS
        missing = [f for f in FIELDS if not isinstance(entry.get(f), str)]
        if unknown or missing:
            raise TemplateError(f"template #{i + 1}: " + "; ".join(
                ([f"unknown keys {sorted(unknown)}"] if unknown else []) + ([f"missing {', '.join(missing)}"] if missing else [])), where)
        tid = f"{lang}/{capability}#{entry.get('id', i)}"
        if tid in seen:
            raise TemplateError(f"template #{i + 1}: id {entry.get('id', i)!r} is taken by an earlier template of this file", where)
        seen.add(tid)
        texts = {f: entry[f] for f in FIELDS}
        locators = {f: _locator(_child(node, f), entry[f], shown, lines, f) for f in FIELDS}
        alts = entry.get("alternatives") or []
        alt_node = _child(node, "alternatives")
        for j, a in enumerate(alts):
            if not isinstance(a, str):
                raise TemplateError(f"alternative #{j + 1} must be a string", _where(_child(alt_node, j), shown))
            if a.startswith("re:"):
                continue  # a regular expression, checked as it stands
            key = f"alternative{j}"
            texts[key] = a
            locators[key] = _locator(_child(alt_node, j), a, shown, lines, f"alternatives[{j}]")
        own_node = _child(node, "placeholders")
        own = {k: _values(k, v, _child(own_node, k), shown, lang, resolve) for k, v in (entry.get("placeholders") or {}).items()}
        value_where = {**shared_where, **{k: _where(_child(own_node, k), shown) for k in own}}
        alt_keys = tuple(k for k in texts if k.startswith("alternative"))
        template = Template(texts, language, entry.get("options"), template_name=tid, locators=locators,
                            value_where=value_where, placeholders={**shared, **own}, optional=alt_keys)
        regexes = tuple(a for a in alts if isinstance(a, str) and a.startswith("re:"))
        n = entry.get("n", 100)
        if not isinstance(n, int) or isinstance(n, bool) or n < -1:
            raise TemplateError(f"template #{i + 1}: n must be a number of tests (-1: all), not {n!r}",
                                _where(_child(node, "n"), shown))
        out.append(TestTemplate(tid, lang, capability, template, alt_keys, n, language, regexes))
    return out


def load_language_templates(lang: str, *, root: Path | None = None, resolve: Resolver | None = None) -> list[TestTemplate]:
    out = []
    for path in template_files(lang, root):
        out.extend(load_file(path, resolve=resolve, lang=lang))
    return out


def coverage_table(root: Path | None = None, langs: list[str] | None = None) -> str:
    """Languages x the M2C paper's test types, as a Markdown table: ✓ where a template of the type renders
    tests, then the language-specific test types (capability: ids)."""
    langs = langs or available()
    types = [(cap, tt) for cap, pair in PAPER_TEST_TYPES.items() for tt in pair]
    lines = ["| lang | " + " | ".join(f"{cap}: {tt}" for cap, tt in types) + " | language-specific |",
             "|---|" + "---|" * (len(types) + 1)]
    for lang in langs:
        have: dict[str, list[str]] = {}
        for t in load_language_templates(lang, root=root):
            if len(t.template):
                have.setdefault(t.capability, []).append(template_type(t.template_id))
        cells = ["✓" if tt in have.get(cap, []) else "" for cap, tt in types]
        own = [f"{cap}: {', '.join(ids)}" for cap, ids in sorted(have.items()) if cap not in PAPER_TEST_TYPES]
        lines.append(f"| {lang} | " + " | ".join(cells) + f" | {'; '.join(own)} |")
    return "\n".join(lines)
