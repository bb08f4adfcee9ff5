"""Files generated from the shipped M2C templates, which tests keep current: the README's coverage table
(languages x the paper's test types) and a fixed sample for a linguist to read, 15 tests per language and
test type, one file per language under tests/data/m2c_sample/. `python tests/m2c_generated.py` rewrites
both."""

from __future__ import annotations

import re
from pathlib import Path

from builder.m2c.language import available
from builder.m2c.template_files import coverage_table, load_language_templates, template_type

ROOT = Path(__file__).parent.parent
SAMPLE = Path(__file__).parent / "data" / "m2c_sample"
PER_TYPE = 15
SEED = 2024
README_BLOCK = re.compile(r"(<!-- m2c-coverage -->\n)(.*?)(<!-- /m2c-coverage -->)", re.S)


def sample_text(lang: str) -> str:
    """The sample of one language as its file holds it."""
    out = [f"# M2C sample, {lang}: {PER_TYPE} tests per test type, seed {SEED} (tests/m2c_generated.py)", ""]
    for tt in load_language_templates(lang):
        out.append(f"## {tt.capability}: {template_type(tt.template_id)} ({len(tt.template)} tests)")
        for i, t in enumerate(tt.tests(n=PER_TYPE, seed=SEED), 1):
            also = f"  | also: {' · '.join(t.alternatives)}" if t.alternatives else ""
            out += [f"{i:2}. C: {t.context}", f"    Q: {t.question}", f"    A: {t.answer}{also}"]
        out.append("")
    return "\n".join(out)


def readme_table(readme: str) -> str:
    """The coverage table the README holds now."""
    return README_BLOCK.search(readme).group(2).strip()


def main() -> None:
    SAMPLE.mkdir(parents=True, exist_ok=True)
    for lang in available():
        (SAMPLE / f"{lang}.txt").write_text(sample_text(lang), encoding="utf-8")
    path = ROOT / "README.md"
    readme = path.read_text(encoding="utf-8")
    path.write_text(README_BLOCK.sub(lambda m: m.group(1) + coverage_table() + "\n" + m.group(3), readme), encoding="utf-8")


if __name__ == "__main__":
    main()
