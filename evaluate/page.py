"""The report page being written: Markdown cells, the figures drawn for it, what every report section is made with.

`evaluate.report` writes what is common to every run (header, headline scores, cross-method figures)
and asks each method that ran for its own section (`Method.report(page)`), so a method's tables and
figures live in its module. Each figure is saved as DIR/plots/<name>.png next to <name>.csv holding
exactly the numbers drawn; a figure without data is left out with the reason, and the page keeps
the order figures were drawn or left out in, for the report's figure list. Languages' typology
comes from the results (the release's declarations), never from a registry. `plt` is pyplot with a
file-only backend, for every module that draws.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import matplotlib
import pandas as pd

from builder.files import atomic_write
from builder.records import Language
from evaluate.results import Results

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend is chosen before pyplot loads

TYPOLOGIES = ("analytic", "inflectional", "agglutinative")
UNKNOWN = "unknown"  # the typology of a language the results hold no declaration for
EXCLUDED_FROM_TYPOLOGY = "en"
OPEN_ANSWERS = ("m2c",)  # methods whose answer is free text: no chance level

__all__ = ["EXCLUDED_FROM_TYPOLOGY", "TYPOLOGIES", "UNKNOWN", "Page", "chance", "joined", "model_label", "plt",
           "release_label", "table", "text"]


def chance(method: str, metric: str) -> float | None:
    """What guessing scores: a two-way choice (accuracy, F1 of a balanced probe, agreement of two decisions) 0.5; an
    open answer has none."""
    if method in OPEN_ANSWERS or metric in ("bias", "bleu", "chrf", "morph_error_share", "invalid_share"):
        return None
    return 0.5


def model_label(config) -> str:
    """The model as a reader names it: a local folder's or file's name, a Hub or served model's id (never a path)."""
    m = config.model
    return Path(m.gguf_file).name if m.gguf_file else Path(m.name).name if m.source == "local" else m.name


def release_label(config) -> str:
    """The release as a reader names it: its folder's (or Hub dataset's) name and version."""
    source = config.dataset.source
    path = Path(source)
    if not path.exists() and source.count("/") == 1:  # a Hub dataset id
        return f"{source} {config.dataset.version}"
    name = path.parent.name if path.name == "releases" else path.name  # a workspace's releases: the workspace's name
    return f"{name} {config.dataset.version}"


_MARKUP = str.maketrans({c: "\\" + c for c in "\\`*_[]<>|&~#"} | {"\n": "\\\\n", "\r": "\\\\r", "\t": " "})


def text(value) -> str:
    """Any string from a model, tokenizer or dataset as Markdown that shows it literally: every character Markdown or
    HTML give a meaning to escaped (`<s>` stays text, the `|` of `<|im_start|>` does not end a table cell), and line
    breaks shown as \\n so a table row stays one line."""
    return str(value).translate(_MARKUP)


def table(df: pd.DataFrame) -> str:
    """A Markdown table of literal cells (`text`); floats with three decimals."""
    def fmt(v):
        return f"{v:.3f}" if isinstance(v, float) else text(v)
    head = "| " + " | ".join(map(text, df.columns)) + " |\n|" + "---|" * len(df.columns) + "\n"
    return head + "".join("| " + " | ".join(fmt(v) for v in row) + " |\n" for row in df.itertuples(index=False))


def joined(codes) -> str:
    """The distinct language codes of a group, for a figure's data (which languages a bar averages)."""
    return ",".join(sorted(set(codes)))


@dataclass
class Page:
    """One report being written: the results it shows and the figures drawn for it so far."""

    results: Results
    plots: Path
    drawn: dict[str, int] = field(default_factory=dict)  # figure name -> number of values drawn
    omitted: dict[str, str] = field(default_factory=dict)  # figure name -> why it has no data
    figures: list[str] = field(default_factory=list)  # drawn and omitted, in order

    @cached_property
    def scores(self) -> pd.DataFrame:
        return self.results.score_frame()

    @cached_property
    def languages(self) -> dict[str, Language]:
        return {lang.code: lang for lang in self.results.config.dataset.languages}

    def typology(self, langs) -> dict[str, str]:
        return {lang: self.languages[lang].typology if lang in self.languages else UNKNOWN for lang in langs}

    def typologies(self, present) -> list[str]:
        """The typologies among `present`, in their fixed order, unknown last."""
        return [t for t in (*TYPOLOGIES, UNKNOWN) if t in set(present)]

    def lang_order(self, langs) -> list[str]:
        """Languages grouped by typology (in `TYPOLOGIES` order, unknown last), then by code."""
        typ = self.typology(langs)
        rank = {t: i for i, t in enumerate(TYPOLOGIES)}
        return sorted(langs, key=lambda lang: (rank.get(typ[lang], len(rank)), lang))

    def save(self, fig, data: pd.DataFrame, name: str) -> None:
        fig.tight_layout()
        atomic_write(self.plots / f"{name}.png", lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
        plt.close(fig)
        atomic_write(self.plots / f"{name}.csv", lambda tmp: data.to_csv(tmp, index=False))
        self.drawn[name] = int(data["value"].notna().sum()) if "value" in data else len(data)
        self.figures.append(name)

    def omit(self, name: str, why: str) -> None:
        self.omitted[name] = why
        self.figures.append(name)
