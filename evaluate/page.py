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
import numpy as np
import pandas as pd

from builder.files import atomic_write
from builder.records import Language
from evaluate.intervals import wilson
from evaluate.results import Results

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend is chosen before pyplot loads

TYPOLOGIES = ("analytic", "inflectional", "agglutinative")
UNKNOWN = "unknown"  # the typology of a language the results hold no declaration for
EXCLUDED_FROM_TYPOLOGY = "en"
OPEN_ANSWERS = ("m2c",)  # methods whose answer is free text: no chance level

__all__ = ["EXCLUDED_FROM_TYPOLOGY", "TYPOLOGIES", "UNKNOWN", "Page", "chance", "estimate", "heat_panel", "joined", "model_label", "plt",
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
    return Path(m.gguf_file).name if m.gguf_file else Path(m.name).name if m.source in ("local", "control") else m.name


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


def estimate(value: float, n: int) -> str:
    """A table cell of a proportion-like score: the value, its 95% interval (`evaluate.intervals.wilson`) and n."""
    if value != value:
        return "—"
    low, high = wilson(value, n)
    return f"{value:.3f} ({low:.2f}–{high:.2f}, n {n})"


def heat_panel(fig, ax, grid: np.ndarray, label: str, level: float | None, n: np.ndarray | None = None,
               aspect: str = "auto") -> None:
    """One heatmap panel as every report draws it: 0 (dark) to 1 (yellow), each cell's value (and its n), and a colour
    bar naming the metric with chance marked in red."""
    image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect=aspect)
    for (i, j), v in np.ndenumerate(grid):
        if not np.isnan(v):
            ax.text(j, i, f"{v:.2f}" if n is None else f"{v:.2f}\nn {n[i, j]:.0f}", ha="center", va="center",
                    fontsize=7 if n is None else 6, color="w" if v < 0.6 else "k")
    bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
    bar.set_label(label, fontsize=8)
    if level is not None:
        bar.ax.axhline(level, color="red", linewidth=2)
        ticks = sorted({0.0, 0.25, 0.75, 1.0, level})
        bar.set_ticks(ticks, labels=[f"{t:g} chance" if t == level else f"{t:g}" for t in ticks])
        bar.ax.get_yticklabels()[ticks.index(level)].set_color("red")
    bar.ax.tick_params(labelsize=7)


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
    captions: dict[str, str] = field(default_factory=dict)  # figure name -> what it shows and how to read it
    placed: set[str] = field(default_factory=set)  # figures already shown beside their table

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

    def save(self, fig, data: pd.DataFrame, name: str, caption: str) -> None:
        """Draw `fig` to plots/<name>.png beside plots/<name>.csv, the numbers drawn; `caption` says what it shows and
        how to read it."""
        fig.tight_layout()
        atomic_write(self.plots / f"{name}.png", lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
        plt.close(fig)
        atomic_write(self.plots / f"{name}.csv", lambda tmp: data.to_csv(tmp, index=False))
        self.drawn[name] = int(data["value"].notna().sum()) if "value" in data else len(data)
        self.captions[name] = caption
        self.figures.append(name)

    def figure(self, name: str) -> list[str]:
        """Markdown lines showing figure `name` where they stand (beside its table): the image and its caption, or
        why it was not drawn; nothing for a figure never drawn nor omitted."""
        if name not in self.figures:
            return []
        self.placed.add(name)
        if name not in self.drawn:
            return [f"*{name}: not drawn ({text(self.omitted[name])})*", ""]
        return [f"![{name}](plots/{name}.png)", "",
                f"*Figure {name}.* {self.captions[name]} ({self.drawn[name]} values: [data](plots/{name}.csv))", ""]

    def unplaced(self) -> list[str]:
        """The figures no section showed, each with its caption."""
        return [line for name in self.figures if name not in self.placed for line in self.figure(name)]

    def omit(self, name: str, why: str) -> None:
        self.omitted[name] = why
        self.figures.append(name)
