"""Re-recording the demo's replies (a maintainer's tool; tests use its lexicon too): the OpenAI-compatible stand-in
answers the demo from the sample's answer files (`demo_lexicon`), and the replies are exported as the bundled recording.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from rich.console import Console

from annotation.server import stop
from builder.demo import DEMO_VERSION, RECORDING_MODEL, run_demo, self_translation
from builder.generate import english_sentence
from builder.llm.cache import LLMCache
from builder.llm.config import RECORDED_AS, LLMSettings
from builder.llm.recording import export_recording
from builder.paths import sample_dir
from builder.testing.standin import Lexicon, StandinServer
from builder.workspace.store import open_workspace
from evaluate.backends import CACHE_FILE
from evaluate.data import load_release_pairs


def record_demo(out_path: Path, console: Console) -> int:
    """Re-record the demo's replies: run the demo against the stand-in server answering from the
    sample's answer files, and the LLM's self-translation of its release, then export both caches
    as the bundled recording (a maintainer's tool)."""
    with tempfile.TemporaryDirectory() as tmp, StandinServer(demo_lexicon(), model=RECORDING_MODEL) as server:
        settings = LLMSettings(base_url=server.base_url, api_key="recording", model=RECORDED_AS, source="api")
        try:
            done = run_demo(Path(tmp) / "ws", console, settings, auto_review=True, evaluate=False)
        finally:
            stop(Path(tmp) / "ws")
        llm_out = Path(tmp) / "llm"
        self_translation(*load_release_pairs(done.release, DEMO_VERSION), settings, llm_out)
        ws = open_workspace(Path(tmp) / "ws")
        caches = [LLMCache.of_workspace(ws), LLMCache.open(llm_out / CACHE_FILE)]
        try:
            return export_recording(out_path, *caches)
        finally:
            for cache in caches:
                cache.close()
            ws.close()


def demo_lexicon():
    """The stand-in's knowledge of the sample: the answer files, plus, for self-translation, each English
    sentence's translation (the sample's sentence in that language) and which sentences are true."""
    lex = Lexicon.from_answers(sample_dir() / "demo" / "answers")
    langs = sorted({lang for lang, _, _ in lex.sentences})
    for line in (sample_dir() / "seeds" / "comps.jsonl").read_text(encoding="utf-8").splitlines():
        c = json.loads(line)
        for role in ("acceptable", "unacceptable"):
            english = english_sentence(c[f"prefix_{role}"], c["property_phrase"])[0]
            known = [lex.sentences.get((lang, c["property"], c[f"{role}_concept"])) for lang in langs]
            for lang, rec in zip(langs, known):
                if rec:
                    lex.add_text(lang, english, rec["sentence"])
            if role == "acceptable":
                lex.facts.update([english, *(rec["sentence"] for rec in known if rec)])
    return lex

