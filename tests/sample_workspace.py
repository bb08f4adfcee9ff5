"""The demo's data built by the real stages without Label Studio, for fixtures that need a workspace.

Seeds, translation replayed from the bundled recording, verification with `builder accept` (the
review route that needs no server), sentence generation and the pair audits: the same words,
sentences and audit flags the demo produces, in seconds.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from builder import languages
from builder.audits import audit
from builder.demo import DEMO_TARGETS
from builder.generate import generate
from builder.llm.config import LLMSettings
from builder.m2c.render import render_tests
from builder.paths import sample_dir
from builder.releases.publish import PublishRequest, publish
from builder.reviews import accept
from builder.runner import run_stage
from builder.seeds import import_seeds
from builder.selection import Scope
from builder.translate import translate
from builder.workspace.store import init_workspace, open_workspace

REVIEWER = "demo-curator"


def build_sample_workspace(directory: Path) -> Path:
    settings, quiet = LLMSettings.from_env(), Console(quiet=True)
    ws = init_workspace(directory)
    try:
        import_seeds(ws, sample_dir() / "seeds")
        reg = languages.registry(ws)
        scope = Scope.parse(ws, str(sample_dir() / "demo" / "properties.txt"))
        targets = [reg[c] for c in DEMO_TARGETS]
        run_stage(ws, settings, "translate", lambda c, p: translate(ws, c, targets, scope=scope), quiet)
        for code in DEMO_TARGETS:
            accept(ws, code, reviewer=REVIEWER)
        gen = [reg[c] for c in ("en", *languages.SEED_LANGUAGES, *DEMO_TARGETS)]
        run_stage(ws, settings, "generate", lambda c, p: generate(ws, c, gen, scope=scope), quiet)
        run_stage(ws, settings, "audit", lambda c, p: audit(ws, c, gen, scope=scope), quiet)
    finally:
        ws.close()
    return directory


def build_sample_release(root: Path, version: str, *, m2c_langs: tuple[str, ...] = (), m2c_n: int | None = None) -> Path:
    """The sample workspace under `root/ws`, with M2C tests rendered for `m2c_langs`, published to `root/releases`."""
    build_sample_workspace(root / "ws")
    ws = open_workspace(root / "ws")
    try:
        for lang in m2c_langs:
            render_tests(ws, lang, n=m2c_n)
        publish(ws, PublishRequest(target=root / "releases", version=version))
    finally:
        ws.close()
    return root / "releases"


def publish_changed(root: Path, version: str, *, every: int = 10) -> set[str]:
    """Release `version` of the workspace under `root/ws` into `root/releases` with every `every`-th pair (by pair id,
    in every language) and M2C test reworded, as a curator's corrections would: returns the changed pair ids."""
    from sqlalchemy import select

    from builder.m2c.template_files import test_id
    from builder.workspace import schema as t

    ws = open_workspace(root / "ws")
    try:
        ids = sorted({r["pair_id"] for r in ws.rows(select(t.sentence_pairs.c.pair_id))})[::every]
        pairs = ws.rows(select(t.sentence_pairs).where(t.sentence_pairs.c.pair_id.in_(ids)))
        tests = ws.rows(select(t.m2c_tests).order_by(t.m2c_tests.c.test_id))[::every]
        with ws.transaction() as conn:
            for p in pairs:
                where = (t.sentence_pairs.c.pair_id == p["pair_id"]) & (t.sentence_pairs.c.lang == p["lang"])
                conn.execute(t.sentence_pairs.update().where(where).values(
                    acceptable=p["acceptable"].rstrip(".。") + " (2).", unacceptable=p["unacceptable"].rstrip(".。") + " (2)."))
            for test in tests:  # another text is another test, with an id of its own
                context = test["context"] + " (2)"
                conn.execute(t.m2c_tests.update().where(t.m2c_tests.c.test_id == test["test_id"]).values(
                    context=context, test_id=test_id(test["lang"], test["template_id"], context, test["question"],
                                                     test["answer"])))
        publish(ws, PublishRequest(target=root / "releases", version=version))
    finally:
        ws.close()
    return set(ids)
