"""Method `selftranslate`: does a decision survive the model's own translation? (multisense paper §3.3, §4)

The task is put in a source language: which of two sentences (the pair's acceptable and unacceptable
ones, the acceptable one first for half of the items, by pair id) is true, answered with A or B, in
the words of data/selftranslate/prompts.yaml. For each direction source-target (by default English
into every other language of the release; `translate_directions` asks for any, e.g. de-en) the model
translates, with the source language's translation prompt, the instruction (its prefix, the word for
"sentence" and its suffix, in separate requests, recomposed as the paper does) and each source
sentence (one request per sentence). Conditions:
  original  the source instruction with the source input (the reference of every comparison)
  I         its translated instruction, source input
  X         source instruction, its translated input
  T         both translated
Each condition's decisions are compared with the original's (`evaluate.decision_agreement`: "invalid"
is a label, the split by whether the original was right), which gives the paper's Table 1 (T, I, X per
direction). Its sentence translations are scored against the released, curator-verified sentences of
the target language (`evaluate.quality`: BLEU with the language's tokenizer, chrF), per item quality
is correlated with per item consistency, and consistency is recomputed on items translated with
BLEU >= 50 (the paper's threshold). Scores of a direction have `lang` "source-target" ("en-de").
With `EvalOptions.sample_selftranslate` only a sample of the source pairs is asked (at most that many per
source language and negative type, drawn by seed), and the report says so.

A local model decides by scoring "A" and "B" where its reply begins (after the chat template's
rendering of the prompt, for a chat model: it never gives an invalid answer); a model behind an
endpoint answers in free text, read by `evaluate.answers.read_answer`, with or without
`--score-endpoint`: the server applies its own chat template and does not say which, so where the
reply begins is not known to score it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from builder.errors import InputError
from builder.paths import data_dir
from evaluate.answers import read_answer
from evaluate.data import sample_rows
from evaluate.decision_agreement import breakdown, label_distribution
from evaluate.methods import ALL, ITEM_COLUMNS, Context, EvalOptions, MethodOutput, Score, register
from evaluate.page import Page, plt, table
from evaluate.protocols import TextGenerator
from evaluate.quality import ItemTranslation, Segment, consistency_above, correlate, score_translations

SOURCE = "en"  # the default source: English into every other language of the release
CONDITIONS = ("I", "X", "T")
LETTERS = ("A", "B")
HIGH_QUALITY_BLEU = 50.0
MAX_TRANSLATION_TOKENS = 64
MAX_ANSWER_TOKENS = 20
_QUOTES = "\"'“”„‘’«»「」『』"


@dataclass(frozen=True)
class Instruction:
    """The task's instruction in three parts, translated one by one and recomposed."""

    prefix: str
    sentence: str
    suffix: str

    def task(self, first: str, second: str) -> str:
        return f"{self.prefix}\n{self.sentence} A: “{first}”\n{self.sentence} B: “{second}”\n{self.suffix}"


class SourcePrompts(BaseModel):
    """One source language's entry of data/selftranslate/prompts.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    prefix: str
    sentence: str
    suffix: str
    translate: str
    targets: dict[str, str] = {}  # target code -> its name in the source language (not for English)

    @property
    def instruction(self) -> Instruction:
        return Instruction(self.prefix, self.sentence, self.suffix)


@lru_cache(maxsize=1)
def source_prompts() -> dict[str, SourcePrompts]:
    path = data_dir() / "selftranslate" / "prompts.yaml"
    out = {}
    for lang, entry in yaml.safe_load(path.read_text(encoding="utf-8")).items():
        try:
            out[lang] = SourcePrompts.model_validate(entry)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']}" for e in exc.errors())
            raise InputError(f"{path}: {lang}: {problems}") from None
        if "{language}" not in out[lang].translate or "{text}" not in out[lang].translate:
            raise InputError(f"{path}: {lang}: translate must hold {{language}} and {{text}}")
    return out


def directions(asked: tuple[str, ...], langs: list[str]) -> list[tuple[str, str]]:
    """(source, target) pairs: those asked ("de-en"), or English into every other language of the release."""
    if not asked:
        if SOURCE not in langs or len(langs) < 2:
            raise InputError("selftranslate: needs English pairs and at least one other language in the release "
                             "(or directions between the release's languages: --translate-directions de-zh,zh-de)")
        return [(SOURCE, lang) for lang in sorted(langs) if lang != SOURCE]
    out = [tuple(d.split("-")) for d in asked]
    missing = sorted({lang for d in out for lang in d} - set(langs))
    if missing:
        raise InputError(f"selftranslate: the evaluated pairs have no {', '.join(missing)} for the directions "
                         f"{', '.join(asked)}; languages evaluated: {', '.join(sorted(langs))}")
    return list(dict.fromkeys(out))


def target_name(source: str, target: str, prompts: dict[str, SourcePrompts], ctx: Context) -> str:
    """How the source language's translation prompt names the target, or a clear error."""
    where = data_dir() / "selftranslate" / "prompts.yaml"
    if target not in ctx.languages:
        raise InputError(f"selftranslate: the release declares no {target}, whose name and script the translation "
                         "prompt and its scoring need; evaluate the other languages (--langs)")
    if source not in prompts:
        raise InputError(f"selftranslate: no prompts for source language {source} in {where} (its instruction and "
                         f"translation prompt, written by a speaker), so {source}-{target} cannot be asked")
    if source == SOURCE:
        return ctx.languages[target].name
    if target not in prompts[source].targets:
        raise InputError(f"selftranslate: {where}: {source}.targets names no {target}: how the {source} translation "
                         f"prompt names that language, which {source}-{target} needs")
    return prompts[source].targets[target]


def acceptable_first(pair_id: str) -> bool:
    return hashlib.sha256(pair_id.encode()).digest()[0] % 2 == 0


def clean_translation(reply: str) -> str:
    """The translation in a reply: its first non-empty line, without quotes only where they wrap all of it
    (「A」または「B」で答えてください。 keeps its opening bracket)."""
    line = next((ln.strip() for ln in reply.splitlines() if ln.strip()), "")
    while len(line) >= 2 and line[0] in _QUOTES and line[-1] in _QUOTES:
        line = line[1:-1].strip()
    return line


def options(pair_id: str, acceptable: str, unacceptable: str) -> tuple[str, str]:
    return (acceptable, unacceptable) if acceptable_first(pair_id) else (unacceptable, acceptable)


def letter_sentence(pair_id: str, letter: str | None) -> str | None:
    """The sentence of the pair that option `letter` shows ("acceptable" or "unacceptable"); None for no letter."""
    if letter is None:
        return None
    return "acceptable" if (letter == "A") == acceptable_first(pair_id) else "unacceptable"


def arrow(direction: str) -> str:
    return direction.replace("-", "→")


def figure(summary: pd.DataFrame, page: Page) -> None:
    """Per direction, consistency with the source original under I, X and T, beside the BLEU of its translations."""
    if summary.empty:
        page.omit("selftranslate_consistency", "no direction was translated")
        return
    order = list(dict.fromkeys(summary["direction"]))
    conditions = list(dict.fromkeys(summary["condition"]))
    data = summary[["direction", "condition", "overall"]].rename(columns={"overall": "value"}).assign(metric="consistency")
    bleu = summary.dropna(subset=["bleu"]).drop_duplicates("direction")[["direction", "bleu"]] if "bleu" in summary else pd.DataFrame()
    fig, ax = plt.subplots(figsize=(2 + 0.9 * len(order), 3.2))
    width = 0.8 / len(conditions)
    for k, cond in enumerate(conditions):
        values = data[data["condition"] == cond].set_index("direction")["value"].reindex(order)
        ax.bar(np.arange(len(order)) + (k - (len(conditions) - 1) / 2) * width, values, width, label=cond)
    ax.set_xticks(range(len(order)), [arrow(d) for d in order])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("consistency with the source")
    ax.legend(title="condition", fontsize=7, ncol=len(conditions), loc="upper center", bbox_to_anchor=(0.5, -0.12))
    if not bleu.empty:
        twin = ax.twinx()
        twin.plot([order.index(x) for x in bleu["direction"]], bleu["bleu"], "k*", label="BLEU")
        twin.set_ylim(0, 105)
        twin.set_ylabel("BLEU of its translations")
        data = pd.concat([data, bleu.rename(columns={"bleu": "value"}).assign(condition="X/T", metric="bleu")])
    ax.set_title("Self-translation")
    page.save(fig, data, "selftranslate_consistency",
              "Per direction, the share of items decided as on the source original when the model translated the "
              "instruction (I), the input (X) or both (T) itself (bars, left axis; 0.5 is what two random answers agree "
              "on), and the BLEU of its translations (stars, right axis). Consistency of 1.0 at low accuracy means the "
              "same answer everywhere, not understanding.")


def table1(summary: pd.DataFrame) -> pd.DataFrame:
    """The paper's Table 1: consistency with the original per direction (rows) under T, I and X (columns)."""
    grid = summary.pivot(index="direction", columns="condition", values="overall")
    grid = grid.reindex(index=list(dict.fromkeys(summary["direction"])), columns=["T", "I", "X"])
    return grid.rename(index=arrow).rename_axis("Src→Tgt").reset_index().rename_axis(None, axis=1)


def section(tables: dict[str, pd.DataFrame], options: EvalOptions = EvalOptions()) -> list[str]:
    summary = tables["selftranslate_summary"]
    cols = [c for c in ("direction", "condition", "n", "overall", "on_correct", "on_incorrect", "accuracy", "bleu", "chrf",
                        "tokenizer", "pearson_chrf", "spearman_chrf", "n_high_quality", "consistency_high_quality") if c in summary]
    lines = ["## Self-translation consistency (multisense I / X / T)", ""]
    if options.sample_selftranslate is not None:
        originals = tables["selftranslate_items"].query("condition == 'original'")
        lines += [f"**A sample**: at most {options.sample_selftranslate} pairs per source language and negative type, drawn "
                  f"with seed {options.seed} ({len(originals)} source pairs asked); without `--sample-selftranslate`, "
                  "`builder eval run` asks every pair.", ""]
    lines += ["The model's decisions on its own translation of the instruction (I), the input (X) or both (T) from the "
              "source language into the target, against its decisions on the source original (the paper's Table 1):", "",
              table(table1(summary)), "",
              "In full, with its sentence translations scored against the released ones (BLEU, chrF), quality correlated "
              "with consistency, and consistency on items with BLEU >= 50:", "",
              table(summary[cols]), ""]
    labels = tables.get("selftranslate_labels")
    if labels is not None and not labels.empty:
        dist = labels.pivot_table(index=["direction", "condition"], columns="label", values="share", fill_value=0.0).reset_index()
        lines += ["### Predicted label distributions", "", table(dist), ""]
    return lines


@dataclass
class Original:
    """A source language's task as released, and the model's decisions on it."""

    source: str
    rows: pd.DataFrame  # the source language's pairs asked (a sample of them with `sample_selftranslate`), by pair id
    options: dict[str, tuple[str, str]]  # pair id -> (sentence A, sentence B)
    decisions: dict[str, str | None]
    replies: list[str]


class SelfTranslate:
    name = "selftranslate"
    headline = ("T", "consistency")
    needs = (TextGenerator,)  # and it scores the answers where the backend offers scores and its prompt format

    def translate(self, ctx: Context, texts: list[str], template: str, name: str, direction: str) -> list[str]:
        prompts = [template.format(language=name, text=t) for t in texts]
        replies = ctx.generator.generate(prompts, max_new_tokens=MAX_TRANSLATION_TOKENS, stage="selftranslate: translation",
                                         lang=direction.split("-")[1],
                                         progress=lambda d, t: ctx.progress(f"selftranslate: translate {arrow(direction)}", d, t))
        return [clean_translation(r) for r in replies]

    def decide(self, ctx: Context, prompts: list[str], lang: str) -> tuple[list[str], list[str | None]]:
        """(replies, letters) for prompts whose instruction is in `lang`."""
        task = f"selftranslate: answer ({lang})"
        if ctx.scorer is not None and ctx.reply_format is not None:
            contexts = [ctx.reply_format.reply_context(p, without=ctx.scorer.setup.bos_token) for p in prompts]
            scored = ctx.scorer.score([(c, x) for c in contexts for x in LETTERS], lambda d, t: ctx.progress(task, d, t))
            totals = [[float(scored[(c, x)].logprobs.sum()) for x in LETTERS] for c in contexts]
            letters = ["A" if a > b else "B" if b > a else None for a, b in totals]
            return [x or "" for x in letters], letters
        replies = ctx.generator.generate(prompts, max_new_tokens=MAX_ANSWER_TOKENS, stage="selftranslate: answer", lang=lang,
                                         progress=lambda d, t: ctx.progress(task, d, t))
        return replies, [read_answer(r, LETTERS, lang) for r in replies]

    def original(self, ctx: Context, pairs: pd.DataFrame, source: str, words: SourcePrompts) -> Original:
        rows = sample_rows(pairs[pairs["lang"] == source], ctx.options.sample_selftranslate, ctx.options.seed, "pair_id",
                           ["negative_type"]).set_index("pair_id")
        opts = {pid: options(pid, rows.at[pid, "acceptable_sentence"], rows.at[pid, "unacceptable_sentence"]) for pid in rows.index}
        replies, letters = self.decide(ctx, [words.instruction.task(*opts[pid]) for pid in rows.index], source)
        return Original(source, rows, opts, {pid: letter_sentence(pid, x) for pid, x in zip(rows.index, letters)}, replies)

    def run(self, ctx: Context, pairs: pd.DataFrame) -> MethodOutput:
        asked = directions(ctx.options.translate_directions, sorted(pairs["lang"].unique()))
        prompts = source_prompts()
        names = {(s, t): target_name(s, t, prompts, ctx) for s, t in asked}  # every refusal before anything is asked
        originals = {s: self.original(ctx, pairs, s, prompts[s]) for s in dict.fromkeys(s for s, _ in asked)}
        item_rows, instr_rows, trans_rows, summary, scores, labels = [], [], [], [], [], []
        for o in originals.values():
            item_rows += [{"pair_id": pid, "source": o.source, "target": o.source, "condition": "original", "reply": r,
                           "decision": o.decisions[pid]} for pid, r in zip(o.rows.index, o.replies)]
            labels += [{"direction": o.source, "condition": "original", "label": k, "share": v}
                       for k, v in label_distribution(o.decisions).items()]
            scores.append(Score(method=self.name, variant="original", lang=o.source, negative_type=ALL, metric="accuracy",
                                value=sum(d == "acceptable" for d in o.decisions.values()) / len(o.decisions), n=len(o.decisions)))
        for source, target in asked:
            o, direction = originals[source], f"{source}-{target}"
            refs = pairs[pairs["lang"] == target].set_index("pair_id")
            common = [pid for pid in o.rows.index if pid in refs.index]
            if not common:
                continue
            words = prompts[source]
            parts = Instruction(*self.translate(ctx, [words.prefix, words.sentence, words.suffix], words.translate,
                                                names[(source, target)], direction))
            instr_rows += [{"direction": direction, "part": k, "source_text": getattr(words, k), "translation": getattr(parts, k)}
                           for k in ("prefix", "sentence", "suffix")]
            sentences = [s for pid in common for s in (o.rows.at[pid, "acceptable_sentence"], o.rows.at[pid, "unacceptable_sentence"])]
            translated = self.translate(ctx, sentences, words.translate, names[(source, target)], direction)
            hyp = {pid: (translated[2 * i], translated[2 * i + 1]) for i, pid in enumerate(common)}
            quality = score_translations(
                [ItemTranslation(item_id=pid, segments=(Segment(hypothesis=hyp[pid][0], reference=refs.at[pid, "acceptable_sentence"]),
                                                        Segment(hypothesis=hyp[pid][1], reference=refs.at[pid, "unacceptable_sentence"])))
                 for pid in common], target, spaced=ctx.languages[target].spaced)
            per_item = {q.item_id: q for q in quality.items}
            trans_rows += [{"pair_id": pid, "direction": direction, "acceptable": hyp[pid][0], "unacceptable": hyp[pid][1],
                            "acceptable_reference": refs.at[pid, "acceptable_sentence"],
                            "unacceptable_reference": refs.at[pid, "unacceptable_sentence"],
                            "bleu": per_item[pid].bleu, "chrf": per_item[pid].chrf} for pid in common]
            scores += [Score(method=self.name, variant="translation", lang=direction, negative_type=ALL, metric=m,
                             value=getattr(quality, m), n=quality.n_items, extra={"tokenizer": quality.tokenizer.name})
                       for m in ("bleu", "chrf")]
            asked_prompts = {
                "I": [parts.task(*o.options[pid]) for pid in common],
                "X": [words.instruction.task(*options(pid, *hyp[pid])) for pid in common],
                "T": [parts.task(*options(pid, *hyp[pid])) for pid in common],
            }
            src = {pid: o.decisions[pid] for pid in common}
            for cond in CONDITIONS:
                replies, letters = self.decide(ctx, asked_prompts[cond], source if cond == "X" else target)
                got = {pid: letter_sentence(pid, x) for pid, x in zip(common, letters)}
                item_rows += [{"pair_id": pid, "source": source, "target": target, "condition": cond, "reply": r,
                               "decision": got[pid]} for pid, r in zip(common, replies)]
                labels += [{"direction": direction, "condition": cond, "label": k, "share": v}
                           for k, v in label_distribution(got).items()]
                br = breakdown(src, got, dict.fromkeys(common, "acceptable"))
                row = {"direction": direction, "source": source, "target": target, "condition": cond, **br.model_dump(),
                       "accuracy": sum(d == "acceptable" for d in got.values()) / len(common)}
                if cond != "I":
                    same = {pid: float((src[pid] or "invalid") == (got[pid] or "invalid")) for pid in common}
                    chrf, bleu = correlate(quality, same, metric="chrf"), correlate(quality, same, metric="bleu")
                    high = consistency_above(quality, same, HIGH_QUALITY_BLEU, metric="bleu")
                    row |= {"bleu": quality.bleu, "chrf": quality.chrf, "tokenizer": quality.tokenizer.name,
                            "pearson_chrf": chrf.pearson, "spearman_chrf": chrf.spearman, "pearson_bleu": bleu.pearson,
                            "correlation_note": chrf.note, "n_high_quality": high.n_included,
                            "consistency_high_quality": high.consistency_included}
                summary.append(row)
                for metric, value, n in (("consistency", br.overall, br.n), ("consistency_correct", br.on_correct, br.n_correct),
                                         ("consistency_incorrect", br.on_incorrect, br.n_incorrect),
                                         ("accuracy", row["accuracy"], len(common)),
                                         ("consistency_high_quality", row.get("consistency_high_quality"), row.get("n_high_quality", 0))):
                    if value is not None:
                        scores.append(Score(method=self.name, variant=cond, lang=direction, negative_type=ALL, metric=metric,
                                            value=value, n=n))
        tables = {"selftranslate_summary": pd.DataFrame(summary), "selftranslate_items": pd.DataFrame(item_rows),
                  "selftranslate_translations": pd.DataFrame(trans_rows), "selftranslate_instructions": pd.DataFrame(instr_rows),
                  "selftranslate_labels": pd.DataFrame(labels, columns=["direction", "condition", "label", "share"])}
        return MethodOutput(pd.DataFrame(columns=list(ITEM_COLUMNS)), scores, tables)

    def report(self, page: Page) -> list[str]:
        summary = page.results.tables["selftranslate_summary"]
        figure(summary, page)
        return ([*section(page.results.tables, page.results.config.options), *page.figure("selftranslate_consistency")]
                if not summary.empty else [])


register(SelfTranslate())
