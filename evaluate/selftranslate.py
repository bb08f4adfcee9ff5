"""Method `selftranslate`: does a decision survive the model's own translation? (multisense paper §3.3, §4)

The task is put in English: which of two sentences (the pair's acceptable and unacceptable ones, the
acceptable one first for half of the items, by pair id) is true, answered with A or B. The model then
translates, into each other language of the release, the instruction (its prefix, the word
"Sentence" and its suffix, in separate requests, recomposed as the paper does) and each sentence
(one request per sentence), with the paper's translation instruction. Conditions:
  original  English instruction, English input (the source of every comparison)
  I         its translated instruction, English input
  X         English instruction, its translated input
  T         both translated
Each condition's decisions are compared with the original's (`evaluate.decision_agreement`: "invalid" is a
label, the split by whether the original was right). Its sentence translations are scored against
the released, curator-verified sentences of that language (`evaluate.quality`: BLEU with the
language's tokenizer, chrF), per item quality is correlated with per item consistency, and
consistency is recomputed on items translated with BLEU >= 50 (the paper's threshold).

A local model decides by scoring "A" and "B" after the prompt (it never gives an invalid answer); a
model behind an endpoint answers in free text, read by `evaluate.answers.normalize`.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from evaluate.answers import normalize
from evaluate.decision_agreement import breakdown, label_distribution
from evaluate.methods import ALL, ITEM_COLUMNS, Context, MethodOutput, Score, register
from evaluate.quality import ItemTranslation, Segment, consistency_above, correlate, score_translations
from evaluate.reporting import Page, plt, table

SOURCE = "en"
CONDITIONS = ("I", "X", "T")
INSTRUCTION = {"prefix": "Which of the following two sentences is true?", "sentence": "Sentence",
               "suffix": "Please answer with “A” or “B”."}
TRANSLATE = "Please translate the following text into {language}: “{text}”"
LETTERS = ("A", "B")
HIGH_QUALITY_BLEU = 50.0
MAX_TRANSLATION_TOKENS = 64
MAX_ANSWER_TOKENS = 20
_QUOTES = "\"'“”„‘’«»「」『』"


def acceptable_first(pair_id: str) -> bool:
    return hashlib.sha256(pair_id.encode()).digest()[0] % 2 == 0


def task_prompt(parts: dict[str, str], first: str, second: str) -> str:
    word = parts["sentence"]
    return f"{parts['prefix']}\n{word} A: “{first}”\n{word} B: “{second}”\n{parts['suffix']}"


def clean_translation(reply: str) -> str:
    """The translation in a reply: its first non-empty line, without quotes only where they wrap all of it
    (「A」または「B」で答えてください。 keeps its opening bracket)."""
    line = next((ln.strip() for ln in reply.splitlines() if ln.strip()), "")
    while len(line) >= 2 and line[0] in _QUOTES and line[-1] in _QUOTES:
        line = line[1:-1].strip()
    return line


def options(pair_id: str, acceptable: str, unacceptable: str) -> tuple[str, str]:
    return (acceptable, unacceptable) if acceptable_first(pair_id) else (unacceptable, acceptable)


def label(pair_id: str, letter: str | None) -> str | None:
    if letter is None:
        return None
    return "acceptable" if (letter == "A") == acceptable_first(pair_id) else "unacceptable"


def figure(summary: pd.DataFrame, page: Page) -> None:
    """Per language, consistency with the English original under I, X and T, beside the BLEU of its translations."""
    if summary.empty:
        page.omit("selftranslate_consistency", "no language was translated")
        return
    langs = page.lang_order(summary["lang"].unique())
    conditions = list(dict.fromkeys(summary["condition"]))
    data = summary[["lang", "condition", "overall"]].rename(columns={"overall": "value"}).assign(metric="consistency")
    bleu = summary.dropna(subset=["bleu"]).drop_duplicates("lang")[["lang", "bleu"]] if "bleu" in summary else pd.DataFrame()
    fig, ax = plt.subplots(figsize=(2 + 0.9 * len(langs), 3.2))
    width = 0.8 / len(conditions)
    for k, cond in enumerate(conditions):
        values = data[data["condition"] == cond].set_index("lang")["value"].reindex(langs)
        ax.bar(np.arange(len(langs)) + (k - (len(conditions) - 1) / 2) * width, values, width, label=cond)
    ax.set_xticks(range(len(langs)), langs)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("consistency with English")
    ax.legend(title="condition", fontsize=7, ncol=len(conditions), loc="upper center", bbox_to_anchor=(0.5, -0.12))
    if not bleu.empty:
        twin = ax.twinx()
        twin.plot([langs.index(x) for x in bleu["lang"]], bleu["bleu"], "k*", label="BLEU")
        twin.set_ylim(0, 105)
        twin.set_ylabel("BLEU of its translations")
        data = pd.concat([data, bleu.rename(columns={"bleu": "value"}).assign(condition="X/T", metric="bleu")])
    ax.set_title("Self-translation")
    page.save(fig, data, "selftranslate_consistency")


def section(tables: dict[str, pd.DataFrame]) -> list[str]:
    summary = tables["selftranslate_summary"]
    cols = [c for c in ("lang", "condition", "n", "overall", "on_correct", "on_incorrect", "accuracy", "bleu", "chrf",
                        "tokenizer", "pearson_chrf", "spearman_chrf", "n_high_quality", "consistency_high_quality") if c in summary]
    lines = ["## Self-translation consistency (multisense I / X / T)", "",
             "The model's decisions on its own translation of the instruction (I), the input (X) or both (T) against its "
             "decisions on the English original; its sentence translations scored against the released ones "
             "(BLEU, chrF), quality correlated with consistency, and consistency on items with BLEU >= 50.", "",
             table(summary[cols]), ""]
    labels = tables.get("selftranslate_labels")
    if labels is not None and not labels.empty:
        dist = labels.pivot_table(index=["lang", "condition"], columns="label", values="share", fill_value=0.0).reset_index()
        lines += ["### Predicted label distributions", "", table(dist), ""]
    return lines


class SelfTranslate:
    name = "selftranslate"
    headline = ("T", "consistency")

    def translate(self, ctx: Context, texts: list[str], language: str, lang: str) -> list[str]:
        prompts = [TRANSLATE.format(language=language, text=t) for t in texts]
        replies = ctx.generator.generate(prompts, max_new_tokens=MAX_TRANSLATION_TOKENS, stage="selftranslate: translation",
                                         lang=lang, progress=lambda d, t: ctx.progress(f"selftranslate: translate into {lang}", d, t))
        return [clean_translation(r) for r in replies]

    def decide(self, ctx: Context, prompts: list[str], lang: str) -> tuple[list[str], list[str | None]]:
        """(replies, letters) for prompts whose instruction is in `lang`."""
        task = f"selftranslate: answer ({lang})"
        if ctx.scorer is not None:
            scored = ctx.scorer.score([(p + "\n", x) for p in prompts for x in LETTERS], lambda d, t: ctx.progress(task, d, t))
            totals = [[float(scored[(p + "\n", x)].logprobs.sum()) for x in LETTERS] for p in prompts]
            letters = ["A" if a > b else "B" if b > a else None for a, b in totals]
            return [f"{x}" if x else "" for x in letters], letters
        replies = ctx.generator.generate(prompts, max_new_tokens=MAX_ANSWER_TOKENS, stage="selftranslate: answer", lang=lang,
                                         progress=lambda d, t: ctx.progress(task, d, t))
        return replies, [normalize(r, LETTERS, lang) for r in replies]

    def run(self, ctx: Context, pairs: pd.DataFrame) -> MethodOutput:
        en = pairs[pairs["lang"] == SOURCE].set_index("pair_id")
        targets = sorted(lang for lang in pairs["lang"].unique() if lang != SOURCE)
        if en.empty or not targets:
            raise ValueError("selftranslate: needs English pairs and at least one other language in the release")
        unnamed = [lang for lang in targets if lang not in ctx.languages]
        if unnamed:
            raise ValueError(f"selftranslate: the release declares no name for {', '.join(unnamed)}, which the translation "
                             "prompt needs; evaluate the other languages (--langs)")
        ids = list(en.index)
        orig_opts = {pid: options(pid, en.at[pid, "acceptable_sentence"], en.at[pid, "unacceptable_sentence"]) for pid in ids}
        replies, letters = self.decide(ctx, [task_prompt(INSTRUCTION, *orig_opts[pid]) for pid in ids], SOURCE)
        original = {pid: label(pid, x) for pid, x in zip(ids, letters)}
        item_rows = [{"pair_id": pid, "lang": SOURCE, "condition": "original", "reply": r, "decision": original[pid]}
                     for pid, r in zip(ids, replies)]
        instr_rows, trans_rows, summary, scores, labels = [], [], [], [], []
        labels += [{"lang": SOURCE, "condition": "original", "label": k, "share": v} for k, v in label_distribution(original).items()]
        scores.append(Score(method=self.name, variant="original", lang=SOURCE, negative_type=ALL, metric="accuracy",
                            value=sum(d == "acceptable" for d in original.values()) / len(ids), n=len(ids)))
        for lang in targets:
            refs = pairs[pairs["lang"] == lang].set_index("pair_id")
            common = [pid for pid in ids if pid in refs.index]
            if not common:
                continue
            language = ctx.languages[lang].name
            parts = dict(zip(INSTRUCTION, self.translate(ctx, list(INSTRUCTION.values()), language, lang)))
            instr_rows += [{"lang": lang, "part": k, "english": INSTRUCTION[k], "translation": v} for k, v in parts.items()]
            sentences = [s for pid in common for s in (en.at[pid, "acceptable_sentence"], en.at[pid, "unacceptable_sentence"])]
            translated = self.translate(ctx, sentences, language, lang)
            hyp = {pid: (translated[2 * i], translated[2 * i + 1]) for i, pid in enumerate(common)}
            quality = score_translations(
                [ItemTranslation(item_id=pid, segments=(Segment(hypothesis=hyp[pid][0], reference=refs.at[pid, "acceptable_sentence"]),
                                                        Segment(hypothesis=hyp[pid][1], reference=refs.at[pid, "unacceptable_sentence"])))
                 for pid in common], lang, spaced=ctx.languages[lang].spaced)
            per_item = {q.item_id: q for q in quality.items}
            trans_rows += [{"pair_id": pid, "lang": lang, "acceptable": hyp[pid][0], "unacceptable": hyp[pid][1],
                            "acceptable_reference": refs.at[pid, "acceptable_sentence"],
                            "unacceptable_reference": refs.at[pid, "unacceptable_sentence"],
                            "bleu": per_item[pid].bleu, "chrf": per_item[pid].chrf} for pid in common]
            scores += [Score(method=self.name, variant="translation", lang=lang, negative_type=ALL, metric=m,
                             value=getattr(quality, m), n=quality.n_items, extra={"tokenizer": quality.tokenizer.name})
                       for m in ("bleu", "chrf")]
            prompts = {
                "I": [task_prompt(parts, *orig_opts[pid]) for pid in common],
                "X": [task_prompt(INSTRUCTION, *options(pid, *hyp[pid])) for pid in common],
                "T": [task_prompt(parts, *options(pid, *hyp[pid])) for pid in common],
            }
            for cond in CONDITIONS:
                replies, letters = self.decide(ctx, prompts[cond], SOURCE if cond == "X" else lang)
                got = {pid: label(pid, x) for pid, x in zip(common, letters)}
                item_rows += [{"pair_id": pid, "lang": lang, "condition": cond, "reply": r, "decision": got[pid]}
                              for pid, r in zip(common, replies)]
                labels += [{"lang": lang, "condition": cond, "label": k, "share": v} for k, v in label_distribution(got).items()]
                src = {pid: original[pid] for pid in common}
                br = breakdown(src, got, dict.fromkeys(common, "acceptable"))
                row = {"lang": lang, "condition": cond, **br.model_dump(),
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
                        scores.append(Score(method=self.name, variant=cond, lang=lang, negative_type=ALL, metric=metric,
                                            value=value, n=n))
        tables = {"selftranslate_summary": pd.DataFrame(summary), "selftranslate_items": pd.DataFrame(item_rows),
                  "selftranslate_translations": pd.DataFrame(trans_rows), "selftranslate_instructions": pd.DataFrame(instr_rows),
                  "selftranslate_labels": pd.DataFrame(labels, columns=["lang", "condition", "label", "share"])}
        return MethodOutput(pd.DataFrame(columns=list(ITEM_COLUMNS)), scores, tables)

    def report(self, page: Page) -> list[str]:
        summary = page.results.tables["selftranslate_summary"]
        figure(summary, page)
        return section(page.results.tables) if not summary.empty else []


register(SelfTranslate())
