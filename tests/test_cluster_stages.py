"""docs/cluster.md's `stage.sbatch`, submitted to the real single-node Slurm as written there (two array
tasks instead of four) with the page's arguments for each stage, against the stand-in server on a PostgreSQL
workspace: for `translate`, `generate` and `templates fill` the tasks split the work and the stand-in sees no
request twice; a translation cancelled with `scancel` mid-way and submitted again finishes without asking
again for anything answered."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import with_llm
from sqlalchemy import select

from builder.languages import registry
from builder.llm.cache import LLMCache
from builder.paths import sample_dir
from builder.reviews import accept
from builder.seeds import import_seeds
from builder.testing.standin import ServerCounts
from builder.translate import translate
from builder.workspace import schema as t
from builder.workspace.store import init_workspace

pytestmark = [pytest.mark.postgresql, pytest.mark.slurm]

ROOT = Path(__file__).resolve().parent.parent
N_ITEMS = 108 + 85  # concepts + properties of the bundled sample
LANGS = ("hu", "tr", "ja")  # the page's
REQUESTS = len(LANGS) * -(-N_ITEMS // 10)  # ten items a request
# The page's arguments to stage.sbatch, one stage each.
TRANSLATE = ("translate", "--lang", ",".join(LANGS))
GENERATE = ("generate", "--lang", ",".join(LANGS))
FILL = ("templates", "fill", "--lang", "de", "--templates", "templates")
# The team's template for `templates fill`: the demo's German rooms template (data/sample/demo/templates) with 120
# lemmas, twelve requests' worth (more than one task's eight at once), where the shipped templates need no form the
# lexicon lacks.
LEMMAS = {f"Raum{i:03d}": ("MASC", "FEM", "NEUT")[i % 3] for i in range(120)}


def documented_script(job_name: str) -> str:
    """The sbatch script of docs/cluster.md whose `--job-name` is `job_name`, as the page shows it."""
    text = (ROOT / "docs" / "cluster.md").read_text(encoding="utf-8")
    for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M):
        if block.startswith("#!/bin/bash") and f"#SBATCH --job-name={job_name}\n" in block:
            return block
    raise AssertionError(f"docs/cluster.md shows no sbatch script named {job_name}")


@pytest.fixture
def team(tmp_path, new_database, server, slurm):
    """The page's login-node folder: `ws` on PostgreSQL with the sample's seeds, `logs/`, `stage.sbatch`, and the
    environment `sbatch` exports to the tasks (the stand-in as the endpoint)."""
    ws = init_workspace(tmp_path / "ws", database_url=new_database())
    import_seeds(ws, sample_dir() / "seeds")
    # The endpoint's structured-output mode known (as after any earlier run): the workers send no probe to hold.
    LLMCache.of_workspace(ws).record_mode(server.base_url, "standin-translator", "json_schema", {})
    (tmp_path / "logs").mkdir()
    (tmp_path / "stage.sbatch").write_text(documented_script("llm-stage"))
    env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k", "BUILDER_LLM_MODEL": "standin-translator",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # `builder` of this environment
    yield ws, env
    ws.close()


def sbatch(folder: Path, env: dict, stage: tuple[str, ...]) -> str:
    done = subprocess.run(["sbatch", "--parsable", "--array=0-1", "stage.sbatch", *stage], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def until(what: str, done, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s  # a bound on waiting, not a measure: two CLIs start slowly on a busy machine
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.1)


def queued(slurm, job: str) -> bool:
    return bool(slurm.run("squeue", "--noheader", f"--jobs={job}", "--states=PENDING,RUNNING,COMPLETING", check=False).stdout.strip())


def per_item(ws) -> Counter:
    return Counter((r["item_id"], r["lang"]) for r in ws.rows(select(t.proposals.c.item_id, t.proposals.c.lang)))


def logs(folder: Path, job: str) -> list[str]:
    return [p.read_text() for p in sorted((folder / "logs").glob(f"llm-stage-{job}_*.out"))]


def sent(outputs: list[str]) -> list[int]:
    """Requests each task sent (attempts less retries), from the `requests sent …` lines of its log."""
    return [sum(int(m[1]) - int(m[2]) for m in re.finditer(r"requests sent (\d+), retries (\d+)", out)) for out in outputs]


def run_array(ws, env: dict, server, slurm, folder: Path, stage: tuple[str, ...]) -> list[str]:
    """Submit `stage` as two array tasks with every request held until both tasks hold claims at once, then let the
    stand-in answer; the tasks' logs once the array has left the queue."""
    server.hold_after = 0
    job = sbatch(folder, env, stage)
    until("both array tasks holding claims at once",
          lambda: len({r["worker"] for r in ws.rows(select(t.llm_claims.c.worker))}) == 2)
    server.hold_after = None
    server.release.set()  # the held requests fail as dropped connections, and are retried by their worker
    until("the array finished", lambda: not queued(slurm, job))
    outputs = logs(folder, job)
    assert len(outputs) == 2
    return outputs


def assert_each_prompt_once(ws, server, outputs: list[str]) -> None:
    """The stand-in answered every prompt once, and the tasks' requests add up to those prompts."""
    assert server.stats.prompts and set(server.stats.prompts.values()) == {1}, outputs
    assert sum(sent(outputs)) == len(server.stats.prompts), outputs
    assert ws.count(t.llm_claims) == 0


def test_two_array_tasks_translate_one_postgresql_workspace_and_send_no_request_twice(team, server, slurm, tmp_path):
    ws, env = team
    outputs = run_array(ws, env, server, slurm, tmp_path, TRANSLATE)
    counts = Counter(per_item(ws).values())
    assert counts == {1: len(LANGS) * N_ITEMS}, outputs  # every item of every language, once
    assert len(server.stats.requested) == len(LANGS) * N_ITEMS and set(server.stats.requested.values()) == {1}
    assert server.stats.repeats == 0
    assert min(sent(outputs)) > 0 and sum(sent(outputs)) == REQUESTS, outputs  # each task its share; together, each once
    assert_each_prompt_once(ws, server, outputs)


def test_a_translation_cancelled_mid_run_and_submitted_again_asks_nothing_answered_again(team, server, slurm, tmp_path):
    ws, env = team
    server.latency_s = 0.05
    server.hold_after = 12  # twelve replies, then the server holds every request: the run is mid-way when cancelled
    job = sbatch(tmp_path, env, TRANSLATE)

    def stalled() -> bool:
        answered = sum(1 for v in server.stats.answered.values() if v)
        return server.stats.ok >= 12 and server.stats.in_flight == 0 and ws.count(t.proposals) == answered

    until("the run stored every reply it got and waits on held requests", stalled)
    before = ws.count(t.proposals)
    slurm.run("scancel", job)
    until("the cancelled array left the queue", lambda: not queued(slurm, job))
    assert 0 < before < len(LANGS) * N_ITEMS
    server.hold_after = None
    server.release.set()
    again = sbatch(tmp_path, env, TRANSLATE)
    until("the second array finished", lambda: not queued(slurm, again))
    assert Counter(per_item(ws).values()) == {1: len(LANGS) * N_ITEMS}, logs(tmp_path, again)
    assert server.stats.repeats == 0  # no item answered before the cancel was asked again
    assert ws.count(t.llm_claims) == 0


def test_two_array_tasks_generate_sentences_on_one_postgresql_workspace_and_send_no_request_twice(team, server, slurm, tmp_path):
    ws, env = team
    # The words verified first, as curators leave them: translated by the stand-in, every proposal accepted.
    with_llm(ws, server, lambda client: translate(ws, client, [registry(ws)[code] for code in LANGS]))
    for code in LANGS:
        accept(ws, code, reviewer="curator", include_ambiguous=True)
    server.stats = ServerCounts()  # what the generation asks, alone
    outputs = run_array(ws, env, server, slurm, tmp_path, GENERATE)
    rows = ws.rows(select(t.sentence_pairs.c.lang, t.sentence_pairs.c.status))
    # Every pair written in every language (English from COMPS, without the LLM), once, none flagged.
    assert Counter(r["lang"] for r in rows) == dict.fromkeys(("en", *LANGS), ws.count(t.pairs)), outputs
    assert {r["status"] for r in rows} == {"generated"}
    assert min(sent(outputs)) > 0, outputs  # each task sent its share of the sentences and the audits
    assert_each_prompt_once(ws, server, outputs)


def test_two_array_tasks_fill_template_forms_on_one_postgresql_workspace_and_send_no_request_twice(team, server, slurm, tmp_path):
    ws, env = team
    demo = (sample_dir() / "demo" / "templates" / "de" / "rooms.yaml").read_text(encoding="utf-8")
    lemmas = "{" + ", ".join(f"{lemma}: {gender}" for lemma, gender in LEMMAS.items()) + "}"
    (tmp_path / "templates" / "de").mkdir(parents=True)
    (tmp_path / "templates" / "de" / "rooms.yaml").write_text(re.sub(r"lemmas: \{.*\}", f"lemmas: {lemmas}", demo))
    outputs = run_array(ws, env, server, slurm, tmp_path, FILL)
    forms = ws.rows(select(t.lexicon_forms.c.lemma, t.lexicon_forms.c.status, t.lexicon_forms.c.source))
    # Both forms of every lemma proposed once (the dative singular and plural the template needs).
    assert Counter(r["lemma"] for r in forms) == dict.fromkeys(LEMMAS, 2), outputs
    assert {(r["status"], r["source"]) for r in forms} == {("proposed", "llm")}
    assert len(server.stats.requested) == len(LEMMAS) and set(server.stats.requested.values()) == {1}
    assert server.stats.repeats == 0
    assert min(sent(outputs)) > 0, outputs  # one language's requests, shared: each task sent its share
    assert_each_prompt_once(ws, server, outputs)
