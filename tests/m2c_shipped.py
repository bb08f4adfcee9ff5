"""The shipped M2C templates, narrowed: one template of a shipped file with some placeholders cut down to
the values named, rendered in full, so that a check reads the shipped text and values, not a copy."""

from __future__ import annotations

from pathlib import Path

import yaml

from builder.m2c.template_files import M2CTest, load_file, templates_dir


def _names(value) -> set[str]:
    if isinstance(value, str):
        return {value}
    forms = value.get("forms", value)
    return {str(f) for f in forms.values()} | ({value["lemma"]} if "lemma" in value else set())


def _labels(value) -> set[str]:
    """The feature labels a value's bundles mention (a constraint's PORTABLE, a variant's V2)."""
    if isinstance(value, str):
        return set()
    forms = value.get("forms", value)
    return {label for key in [*forms, str(value.get("features") or "")] for label in str(key).split(".") if label}


def render(tmp_path: Path, lang: str, capability: str, template_id: str, **keep) -> list[M2CTest]:
    """Every test of one shipped template, with placeholders narrowed to the values named (by any form),
    and a value for each feature label the named ones lack, so that agreement on it still compiles."""
    raw = yaml.safe_load((templates_dir() / lang / f"{capability}.yaml").read_text(encoding="utf-8"))
    (entry,) = [t for i, t in enumerate(raw["templates"]) if str(t.get("id", i)) == template_id]
    raw["templates"] = [entry]
    for name, wanted in keep.items():
        wanted = [wanted] if isinstance(wanted, str) else wanted
        values = [v for v in raw["placeholders"][name] if _names(v) & set(wanted)]
        assert len(values) == len(wanted), (name, wanted)
        for value in raw["placeholders"][name]:
            if _labels(value) - set().union(*map(_labels, values)):
                values.append(value)
        raw["placeholders"][name] = values
    path = tmp_path / lang / f"{capability}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    (tt,) = load_file(path, lang=lang)
    return list(tt.tests(n=-1))


def one(tests: list[M2CTest], context: str, question: str | None = None) -> M2CTest:
    """The test with this context (and question, where two share a context): exactly one."""
    found = [t for t in tests if t.context == context and question in (None, t.question)]
    assert len(found) == 1, (context, [t.context for t in tests][:5])
    return found[0]
