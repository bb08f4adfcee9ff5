"""What a method may ask of a model: four narrow capabilities, each a Protocol the backends implement.

A method declares the ones it cannot run without (`needs`), and the runner refuses, before
anything is loaded, a method whose needs the chosen backend does not offer (`offered`, `unmet`).
A method may use more than it needs where the backend offers it (meta scores its answers where a
scorer is offered, and reads generated replies elsewhere).

- `TextScorer`: (context, continuation) texts in, the continuation's token log-probabilities out.
  A local model (`evaluate.scoring.Scorer`), or an endpoint that echoes prompt log-probabilities
  (`evaluate.endpoint_scoring.EndpointScorer`, with `--score-endpoint`).
- `TextGenerator`: prompts in, replies out (greedy unless a seeded temperature is asked for). A local
  model (`evaluate.backends.TransformersGenerator`) or any chat endpoint (`EndpointGenerator`).
- `HiddenStates`, local only: the weights and the token ids a text is read as (neuro's layer-wise
  probes and their randomly initialised control). `evaluate.scoring.Scorer`.
- `ReplyFormat`, local only: the text after which the model's reply begins (its chat template), so a
  reply can be scored. An endpoint applies its template on the server and does not say which, so
  behind one a reply is read, not scored. `evaluate.backends.TransformersGenerator`.

The first two are kept to texts in and scores or replies out, so that anything standing between a
method and a model (a store of computed scores) can implement them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from evaluate.models import LoadedModel
    from evaluate.scoring import ProgressFn, ScoringSetup, TokenScores


class TextScorer(Protocol):
    @property
    def setup(self) -> ScoringSetup:
        """How the scores are computed (BOS, tokenization, precision), recorded with the results."""

    def score(self, requests: Sequence[tuple[str, str]],
              progress: ProgressFn | None = None) -> dict[tuple[str, str], TokenScores]:
        """Each unique (context, continuation) scored once: its continuation's tokens' log-probabilities."""


class TextGenerator(Protocol):
    def generate(self, prompts: Sequence[str], *, max_new_tokens: int, stage: str, lang: str | None = None,
                 temperature: float | None = None, seed: int | None = None,
                 progress: ProgressFn | None = None) -> list[str]:
        """One reply per prompt, as one user turn."""


class HiddenStates(Protocol):
    loaded: LoadedModel
    pad_id: int

    @property
    def setup(self) -> ScoringSetup: ...

    def prefix(self) -> list[int]:
        """The token ids every text is read after (the BOS policy's)."""

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's token ids, without special tokens."""


class ReplyFormat(Protocol):
    @property
    def prompt_format(self) -> str:
        """What the model is given for a prompt, with "{prompt}" in its place."""

    def reply_context(self, prompt: str, *, without: str | None = None) -> str:
        """The text after which the model's reply to `prompt` begins (less a leading `without`)."""


Capability = type  # one of the Protocols above
WHAT = {TextScorer: "log-probability scores", TextGenerator: "generated replies",
        HiddenStates: "a local model's hidden states", ReplyFormat: "a local model's prompt format"}
LOCAL = (TextScorer, TextGenerator, HiddenStates, ReplyFormat)


def offered(*, local: bool, score_endpoint: bool = False) -> tuple[Capability, ...]:
    """What a backend offers, known before anything is loaded: a local model everything; an endpoint replies,
    and scores when it is asked to score (its echoed prompt log-probabilities)."""
    if local:
        return LOCAL
    return (TextScorer, TextGenerator) if score_endpoint else (TextGenerator,)


def unmet(name: str, needs: Collection[Capability], offers: Collection[Capability], *, local: bool) -> str | None:
    """One sentence naming the method and what it needs that `offers` lacks, or None when every need is met."""
    missing = [c for c in needs if c not in offers]
    if not missing:
        return None
    what = " and ".join(WHAT[c] for c in missing)
    where = "this model" if local else "an endpoint"
    fix = ("add --score-endpoint for a server that echoes prompt log-probabilities (vLLM, llama.cpp's server), or "
           "evaluate a local model" if missing == [TextScorer] and not local else "evaluate a local model")
    return f"method {name} needs {what}, which {where} does not offer: {fix}"
