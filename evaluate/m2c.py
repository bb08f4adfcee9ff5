"""Method `m2c`: question answering on the released M2C tests, zero-shot and one-shot (M2C paper §6–7).

The prompt is the language's instruction, the context, the question and an empty answer line
(data/m2c/prompts.yaml). One-shot puts a solved test of the same template first: another released
test with the same template_id, drawn from a seed per test so a re-run draws the same; a template with
a single test has no exemplar and is left out of one-shot. Decoding is greedy with at most 20 new
tokens; the reply is its first non-empty line (a base model goes on with the next "Context:"), and
`builder.m2c.answers.validate` judges it: correct, a morphological error (another form of the
gold lexeme) or a miss. Reported per language, per test type and language (the paper's Table 4: a
template's id is its test type, e.g. `in-question`, `position`) and per template: accuracy and the share
of tests answered with a morphological error. With `EvalOptions.sample_m2c` only a sample is asked (at most
that many tests per language and test type, drawn by seed; their exemplars are still drawn from every
test, so each is asked as in the whole run), and the report says so.
"""

from __future__ import annotations

import random
from functools import lru_cache

import pandas as pd
import yaml

from builder.errors import InputError
from builder.m2c.answers import validate
from builder.m2c.template_files import template_type
from builder.paths import data_dir
from evaluate.data import sample_rows
from evaluate.methods import ALL, ITEM_COLUMNS, Context, EvalOptions, MethodOutput, Score, register
from evaluate.page import Page, table
from evaluate.protocols import TextGenerator

MAX_NEW_TOKENS = 20
VARIANTS = ("zero_shot", "one_shot")
LABELS = ("instruction", "context", "question", "answer")


@lru_cache(maxsize=1)
def prompt_words() -> dict[str, dict[str, str]]:
    path = data_dir() / "m2c" / "prompts.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    for lang, words in data.items():
        missing = [k for k in LABELS if not isinstance(words, dict) or not words.get(k)]
        if missing:
            raise InputError(f"{path}: {lang}: missing {', '.join(missing)}")
    return data


def block(words: dict[str, str], context: str, question: str, answer: str = "") -> str:
    return f"{words['context']}{context}\n{words['question']}{question}\n{(words['answer'] + answer).rstrip()}"


def zero_shot(words: dict[str, str], test) -> str:
    return f"{words['instruction']}\n\n{block(words, test['context'], test['question'])}"


def one_shot(words: dict[str, str], test, exemplar) -> str:
    return (f"{words['instruction']}\n\n{block(words, exemplar['context'], exemplar['question'], exemplar['answer'])}\n\n"
            f"{block(words, test['context'], test['question'])}")


def exemplars(tests: pd.DataFrame, seed: int) -> dict[str, str]:
    """test id -> the test id of its exemplar: another test of the same template (none when it has no other)."""
    out = {}
    for _, grp in tests.groupby("template_id"):
        ids = sorted(grp["test_id"])
        for tid in ids:
            others = [i for i in ids if i != tid]
            if others:
                out[tid] = random.Random(f"{seed}|{tid}").choice(others)
    return out


def sampled(tests: pd.DataFrame, options: EvalOptions) -> pd.DataFrame:
    """The tests asked: every one, or with `sample_m2c` at most that many per language and test type (by seed)."""
    return sample_rows(tests.assign(test_type=tests["template_id"].map(template_type)), options.sample_m2c,
                       options.seed, "test_id", ["lang", "test_type"])


def first_line(reply: str) -> str:
    return next((line.strip() for line in reply.splitlines() if line.strip()), "")


def summarise(rows: pd.DataFrame) -> tuple[list[Score], pd.DataFrame]:
    """Accuracy and morphological-error share per variant x language (scores) and per template, with its
    test type (table)."""
    scores = []
    for (variant, lang), grp in rows.groupby(["variant", "lang"]):
        for metric, col in (("accuracy", "correct"), ("morph_error_share", "morphological_error")):
            scores.append(Score(method="m2c", variant=variant, lang=lang, negative_type=ALL, metric=metric,
                                value=float(grp[col].mean()), n=len(grp)))
    templates = (rows.assign(test_type=rows["template_id"].map(template_type))
                 .groupby(["variant", "lang", "capability", "test_type", "template_id"], as_index=False)
                 .agg(n=("test_id", "size"), accuracy=("correct", "mean"), morph_error_share=("morphological_error", "mean")))
    return scores, templates


def by_test_type(t: pd.DataFrame, variant: str) -> pd.DataFrame:
    """Accuracy per test type (rows) and language (columns), with the mean over languages: the paper's Table 4."""
    t = t[t["variant"] == variant]
    grid = (t.assign(correct=t["accuracy"] * t["n"]).groupby(["capability", "test_type", "lang"])[["correct", "n"]].sum()
            .eval("correct / n").unstack("lang"))
    grid["avg"] = grid.mean(axis=1)
    return grid.astype(object).where(grid.notna(), "–").reset_index()  # – : no test of the type in the language


def section(t: pd.DataFrame, options: EvalOptions = EvalOptions()) -> list[str]:
    """Accuracy and morphological errors per test type and language, per template and per language, from the
    `m2c_templates` table; first, which tests were asked when they were a sample."""
    lines = ["## M2C question answering", "",
             "Accuracy per test type and language (zero-shot and one-shot, greedy, at most 20 new tokens), per template, "
             "and the share of tests answered with another form of the gold lexeme (morphological errors).", ""]
    if options.sample_m2c is not None:
        asked = int(t.loc[t["variant"] == "zero_shot", "n"].sum())
        lines += [f"**A sample**: at most {options.sample_m2c} tests per language and test type, drawn with seed "
                  f"{options.seed} ({asked} tests asked); without `--sample-m2c`, `builder eval run` asks every test.", ""]
    for variant in sorted(set(t["variant"]), reverse=True):  # zero_shot first
        lines += [f"### Per test type and language ({variant.replace('_', '-')}, as the paper's Table 4)", "",
                  table(by_test_type(t, variant)), ""]
    grid = t.pivot_table(index=["lang", "capability", "template_id"], columns="variant",
                         values=["n", "accuracy", "morph_error_share"])
    grid.columns = [f"{metric} ({variant})" for metric, variant in grid.columns]
    lines += ["### Per template", "", table(grid.reset_index()), ""]
    per_lang = t.assign(correct=t["accuracy"] * t["n"], morph=t["morph_error_share"] * t["n"]).groupby(
        ["lang", "variant"], as_index=False)[["n", "correct", "morph"]].sum()
    per_lang["accuracy"] = per_lang["correct"] / per_lang["n"]
    per_lang["morph_error_share"] = per_lang["morph"] / per_lang["n"]
    lines += ["### Per language", "", table(per_lang[["lang", "variant", "n", "accuracy", "morph_error_share"]]), ""]
    return lines


class M2C:
    name = "m2c"
    headline = ("zero_shot", "accuracy")
    needs = (TextGenerator,)

    def run(self, ctx: Context, pairs: pd.DataFrame) -> MethodOutput:
        tests = ctx.m2c
        if tests is None or tests.empty:
            raise InputError("m2c: the release has no M2C tests for these languages (configs m2c_<lang>)")
        words = prompt_words()
        missing = sorted(set(tests["lang"]) - set(words))
        if missing:
            raise InputError(f"m2c: no prompt words for {', '.join(missing)} (data/m2c/prompts.yaml)")
        tests = tests.reset_index(drop=True)
        by_id = {r["test_id"]: {**r, "alternatives": list(r["alternatives"]), "answer_forms": list(r["answer_forms"])}
                 for r in tests.to_dict("records")}
        shots = exemplars(tests, ctx.options.seed)  # from every test, so that a sampled test is asked as in the whole run
        chosen = [by_id[t] for t in sampled(tests, ctx.options)["test_id"]]
        asked = [("zero_shot", r, zero_shot(words[r["lang"]], r)) for r in chosen]
        asked += [("one_shot", r, one_shot(words[r["lang"]], r, by_id[shots[r["test_id"]]]))
                  for r in chosen if r["test_id"] in shots]
        replies = ctx.generator.generate([p for _, _, p in asked], max_new_tokens=MAX_NEW_TOKENS, stage="m2c",
                                         progress=lambda d, t: ctx.progress("m2c: questions", d, t))
        rows = []
        for (variant, test, _), reply in zip(asked, replies):
            answer = first_line(reply)
            verdict = validate(answer, test, test["lang"])
            rows.append({"test_id": test["test_id"], "lang": test["lang"], "capability": test["capability"],
                         "template_id": test["template_id"], "variant": variant,
                         "exemplar": shots.get(test["test_id"]) if variant == "one_shot" else None,
                         "reply": reply, "answer": answer, "gold": test["answer"], "correct": verdict.correct,
                         "morphological_error": verdict.morphological_error, "how": verdict.how})
        frame = pd.DataFrame(rows)
        scores, templates = summarise(frame)
        return MethodOutput(pd.DataFrame(columns=list(ITEM_COLUMNS)), scores, {"m2c_items": frame, "m2c_templates": templates})

    def report(self, page: Page) -> list[str]:
        templates = page.results.tables["m2c_templates"]
        return section(templates, page.results.config.options) if not templates.empty else []


register(M2C())
