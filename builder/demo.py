"""The main job on the bundled sample, end to end, in a fresh (or resumed) workspace.

Seeds → LLM translation → review in a local Label Studio → sentence generation and pair audits → sentence review →
M2C fills, their review and rendering → release 0.1.0 → evaluation of SmolLM2-135M-Instruct (the default
model, installed with the project) with every method, on a stated sample of the M2C tests, the self-translation
pairs and consistency's sampled runs (`DEMO_SAMPLE`) → gates → report. `model="toy"` evaluates a toy
trained on the spot instead, for fast runs; a toy cannot translate, so self-translation is then the LLM's.
Every step resumes: a second run re-uses the workspace, the LLM cache, the release and the results.
Without `auto_review` it stops at the first review and says how to continue. Each step reports to the console it is
given, every stage's progress included (bars on a terminal, a line per tenth of each task in a log: `builder.progress`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from annotation.autoreview import accept_open_tasks
from annotation.review import pull, push, stage_tasks
from annotation.server import serve
from builder import languages as languages_mod
from builder.audits import audit
from builder.generate import generate
from builder.llm.config import LLMSettings
from builder.m2c.fills import needs, propose_forms
from builder.m2c.render import render_tests
from builder.paths import sample_dir
from builder.progress import Show, progress
from builder.releases.publish import PublishRequest, default_target, publish
from builder.releases.store import ReleaseStore
from builder.runner import run_stage, with_model
from builder.seeds import import_seeds
from builder.selection import Scope
from builder.translate import translate
from builder.workspace.store import Workspace, init_workspace
from evaluate.data import load_release
from evaluate.gates import check, load_rules, verdict
from evaluate.methods import EvalOptions, resolve
from evaluate.models import load_model
from evaluate.report import build_report
from evaluate.run import run_evaluation
from evaluate.toy import judgement_corpus, train_toy

DEMO_TARGETS = ("ar", "ja", "ru", "vi")  # four typologies and scripts: Arabic, Japanese, Cyrillic, Latin
DEMO_M2C = ("en", "de", "ru", "zh")  # languages with shipped M2C templates among the demo's
DEMO_REVIEWER = "demo-curator"  # the scripted curator's account: never a real curator's name
DEMO_VERSION = "0.1.0"
RECORDING_MODEL = "sample-recording"  # replies written for the sample, not a live model's
TOY_STEPS = 600
TOY = "toy"  # `--model toy`: a toy trained on the release's sentences, instead of the default model
DEMO_METHODS = ("direct", "meta", "neuro", "consistency", "selftranslate", "m2c")
# The demo asks a sample of what the model must generate (the M2C tests, the self-translation pairs and the pairs of
# consistency's two sampled runs), drawn by seed, so that the whole loop runs in under ten minutes on two cores;
# `builder eval run` asks every one unless given --sample-m2c/-selftranslate/-consistency.
DEMO_SAMPLE = EvalOptions(sample_m2c=4, sample_selftranslate=2, sample_consistency=2)
# A toy cannot translate: with --model toy, self-translation is shown on the LLM's replies instead
# (the configured endpoint, or the recording), and the toy runs every other method.
LLM_METHODS = ("selftranslate",)


@dataclass
class DemoResult:
    workspace: Path
    finished: bool  # False: stopped at review, waiting for curators
    label_studio: str | None = None  # its URL, left running for the curators
    release: Path | None = None
    results: Path | None = None
    report: Path | None = None
    gates_passed: bool | None = None
    llm_results: Path | None = None  # self-translation by the LLM, when the evaluated model is the toy
    llm_report: Path | None = None


def run_demo(directory: Path, console: Console, settings: LLMSettings | None = None, *, auto_review: bool = False,
             model: str | None = None, evaluate: bool = True) -> DemoResult:
    settings = settings or LLMSettings.from_env()
    console.rule("[bold]builder demo")
    ws = init_workspace(directory)
    try:
        settings = with_model(ws, settings)
        source = (
            f"the recording bundled with the sample (replies written for it, recorded as model {RECORDING_MODEL})"
            if settings.source == "recording"
            else f"{settings.endpoint}, model {settings.model}"
        )
        console.print(f"LLM replies: {source}")
        return _run(ws, console, settings, auto_review, model, evaluate)
    finally:
        ws.close()


def _run(ws: Workspace, console: Console, settings: LLMSettings, auto_review: bool, model: str | None,
         evaluate: bool) -> DemoResult:
    where = ws.directory.resolve()
    console.print(f" 1/10 workspace: {where}")
    s = import_seeds(ws, sample_dir() / "seeds")
    console.print(f" 2/10 seeds: {s.concepts} new concepts, {s.properties} new properties, {s.pairs} new pairs, "
                  f"{s.seed_translations} new de/zh seed translations")
    reg = languages_mod.registry(ws)
    targets = [reg[c] for c in DEMO_TARGETS]
    scope = Scope.parse(ws, str(sample_dir() / "demo" / "properties.txt"))
    console.print(f" 3/10 translate the demo subset ({len(scope.property_ids)} properties) into {', '.join(DEMO_TARGETS)}")
    run = run_stage(ws, settings, "translate", lambda c, p: translate(ws, c, targets, scope=scope, progress=p), console)
    console.print(f"      proposals: {run.result.proposed}; requests sent {run.stats.sent}, from cache {run.stats.cache_hits}")

    conn = serve(ws.directory, log=console.print)
    console.print(f" 4/10 review the translations in Label Studio at {conn.url}")
    if not _review(ws, conn, console, "translation", DEMO_TARGETS, auto_review):
        return DemoResult(where, finished=False)

    gen_langs = [reg[c] for c in ("en", *languages_mod.SEED_LANGUAGES, *DEMO_TARGETS)]
    console.print(" 5/10 generate sentence pairs in " + ", ".join(lang.code for lang in gen_langs))
    run = run_stage(ws, settings, "generate", lambda c, p: generate(ws, c, gen_langs, scope=scope, progress=p), console)
    console.print(f"      generated {run.result.generated}; flagged {run.result.flagged}")
    run = run_stage(ws, settings, "audit", lambda c, p: audit(ws, c, gen_langs, scope=scope, progress=p), console)
    console.print(f"      {run.result.describe()}")
    if run.result.total:
        console.print(f"[yellow]      the findings are flagged for curators: builder status --flags -w {where}; the judge's "
                      f"verdicts go to Label Studio with builder review push --stage judge[/yellow]")
    console.print(" 6/10 review the sentence pairs")
    sentence_langs = tuple(lang.code for lang in gen_langs if lang.code != "en")
    if not _review(ws, conn, console, "sentences", sentence_langs, auto_review):
        return DemoResult(where, finished=False)

    console.print(" 7/10 M2C: the LLM proposes inflection forms, curators verify them, templates render")
    if not _m2c(ws, conn, console, settings, auto_review):
        return DemoResult(where, finished=False)

    release = _publish(ws, console)
    result = DemoResult(where, finished=True, label_studio=conn.url, release=release)
    if evaluate:
        _evaluate(ws, console, release, model, settings, result)
    return result


def _review(ws: Workspace, conn, console: Console, stage: str, langs: tuple[str, ...], auto_review: bool) -> bool:
    """Push, let the scripted curator decide (with `auto_review`), pull; False while tasks wait for curators."""
    for lang in langs:
        s = push(ws, conn, lang, stage=stage)
        if s.created or s.updated:
            console.print(f"      pushed {stage} {lang}: {s.created} new, {s.updated} updated task(s)")
    if auto_review:
        done = sum(accept_open_tasks(ws, conn, stage, lang, DEMO_REVIEWER) for lang in langs)
        console.print(f"      {DEMO_REVIEWER} (scripted, through the Label Studio API) accepted {done} {stage} task(s)")
    p = pull(ws, conn)
    console.print(f"      pulled {p.new} new annotation(s); newly verified words {p.verified}")
    waiting = {lang: len(stage_tasks(ws, lang, stage)) for lang in langs}
    if any(waiting.values()):
        console.print(f"[yellow]      {sum(waiting.values())} {stage} task(s) wait for curators "
                      f"({', '.join(f'{k} {v}' for k, v in waiting.items() if v)}).[/yellow]")
        console.print(f"      Review them at {conn.url} (user admin@builder.local; password in "
                      f"{ws.directory / 'label-studio' / 'password'}), then run the same command again: it pulls "
                      "your decisions and goes on. Or run it with --auto-review.")
        return False
    return True


def _m2c(ws: Workspace, conn, console: Console, settings: LLMSettings, auto_review: bool) -> bool:
    templates = sample_dir() / "demo" / "templates"
    todo = needs(ws, "de", templates)
    if todo:
        reg = languages_mod.registry(ws)
        order = needs(ws, "de", templates, proposals_missing=True)
        run = run_stage(ws, settings, "fill", lambda c, p: propose_forms(ws, c, reg["de"], todo, order=order, progress=p),
                        console)
        console.print(f"      de: proposed {run.result.proposed} form(s) for {run.result.lemmas} lemma(s)")
    if not _review(ws, conn, console, "inflections", ("de",), auto_review):
        return False
    counts = []
    for lang in DEMO_M2C:
        s = render_tests(ws, lang)
        counts.append(f"{lang} {s.tests}")
    s = render_tests(ws, "de", root=templates)
    counts.append(f"de (sample lexicon template) {s.tests}")
    console.print("      rendered M2C tests: " + ", ".join(counts))
    return True


def _publish(ws: Workspace, console: Console) -> Path:
    target = default_target(ws)
    if target.exists() and DEMO_VERSION in ReleaseStore(target).versions():
        console.print(f" 8/10 release {DEMO_VERSION} exists at {target}; releases are immutable, re-using it")
        return target
    res = publish(ws, PublishRequest(target=target, version=DEMO_VERSION, notes="the demo's release of the bundled sample"))
    console.print(f" 8/10 published {res.version} to {target}: " + ", ".join(f"{k} {v}" for k, v in sorted(res.counts.items())))
    return target


def _evaluate(ws: Workspace, console: Console, release: Path, model: str | None, settings: LLMSettings,
              result: DemoResult) -> None:
    data = load_release(release, DEMO_VERSION, m2c=True)
    names = DEMO_METHODS
    if model == TOY:
        toy = ws.directory / "toy-model"
        if not (toy / "config.json").is_file():
            console.print(f" 9/10 train a toy model on the release's sentences ({TOY_STEPS} steps, a toy: labelled so)")
            train_toy(judgement_corpus(data.pairs), toy, steps=TOY_STEPS)
        model, names = str(toy), tuple(n for n in DEMO_METHODS if n not in LLM_METHODS)
    loaded = load_model(model, log=lambda message: console.print(f"      {message}"))  # None: SmolLM2-135M-Instruct
    out = ws.directory / "eval" / DEMO_VERSION
    methods = resolve(list(names))
    console.print(f" 9/10 evaluate {loaded.info.name} on {len(data.pairs)} pairs with {', '.join(m.name for m in methods)} "
                  f"({loaded.info.device}, {loaded.info.dtype}); a sample, drawn with seed {DEMO_SAMPLE.seed}, of "
                  f"{DEMO_SAMPLE.sample_m2c} M2C tests per language and test type, of {DEMO_SAMPLE.sample_selftranslate} "
                  f"self-translation pairs per negative type and of {DEMO_SAMPLE.sample_consistency} pairs per language and "
                  "negative type for consistency's sampled runs")
    with progress(console) as show:
        results = run_evaluation(data.pairs, data.dataset, loaded, methods, out, DEMO_SAMPLE, show, m2c=data.m2c)
    result.results, result.report, passed = out, *_gates_and_report(console, results, out)
    if names != DEMO_METHODS:
        llm_out = out / "llm"
        console.print(f"      evaluate the LLM on {', '.join(LLM_METHODS)} (it translates the English items itself)")
        with progress(console) as show:
            llm = self_translation(data.pairs, data.dataset, settings, llm_out, show, DEMO_SAMPLE)
        result.llm_results, result.llm_report, llm_passed = llm_out, *_gates_and_report(console, llm, llm_out)
        passed = passed and llm_passed
    result.gates_passed = passed


def self_translation(pairs, info, settings: LLMSettings, out: Path, show: Show | None = None,
                     options: EvalOptions = EvalOptions()):
    """The LLM's self-translation consistency on the release (replayed from the recording when no endpoint is set):
    of every pair unless `options` asks for a sample (the recording holds replies for every pair)."""
    return run_evaluation(pairs, info, None, resolve(list(LLM_METHODS)), out, options, show, endpoint=settings)


def _gates_and_report(console: Console, results, out: Path) -> tuple[Path, bool]:
    checks = check(results, load_rules())
    failed = [c for c in checks if not c.passed]
    console.print(f"10/10 gates for {results.config.model.name}: {len(checks) - len(failed)} passed, {len(failed)} failed")
    for c in failed[:5]:
        console.print(f"      FAIL {c.method}/{c.variant} {c.lang} {c.negative_type}: {'; '.join(c.failures)}")
    if len(failed) > 5:
        console.print(f"      … and {len(failed) - 5} more: builder eval gate {out}")
    rep = build_report(out)
    console.print(f"      report with {len(rep.plots)} figures: {rep.html}")
    return rep.html, verdict(checks) != "fail"
