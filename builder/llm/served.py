"""Which model requests name when none is set: the one the endpoint serves, so that the model recorded,
priced and credited (Label Studio's drafts, the dataset card) is the one that did the work.

llama.cpp's and other local servers answer to any model name and echo it in their replies: a default
name would be recorded for a model that never ran. So with no `BUILDER_LLM_MODEL` (or `--model`) the
client asks the endpoint's `/models` and takes the model when it lists exactly one; a list of several
(vLLM with adapters, Ollama, gateways) or none is refused with the list.

The hosted OpenAI API lists dozens of models (chat, embeddings, audio), so that rule would always
refuse there. It keeps a documented default instead (`HOSTED_DEFAULTS`): there the name means one
model, the API serves that very snapshot, and its replies name it, so the record stays true; and the
set-ups that only set `OPENAI_API_KEY` keep working. Nowhere else is a name assumed.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import openai

from builder.errors import BuilderError
from builder.llm.endpoint import DEFAULT_URL, key_refused, unreachable

HOSTED_DEFAULTS = {"api.openai.com": "gpt-4o-2024-08-06"}  # host -> the model asked for when none is set
MAX_LISTED = 20  # models a refusal names


class NoModel(BuilderError):
    """No model is set and the endpoint does not serve exactly one (the message says which it serves)."""


def hosted_default(base_url: str | None) -> str | None:
    """The documented default model of a hosted API at this base URL; None for any other endpoint."""
    return HOSTED_DEFAULTS.get(urlsplit(base_url or DEFAULT_URL).hostname or "")


async def served_model(sdk: openai.AsyncOpenAI, url: str) -> str:
    """The one model the endpoint lists at `/models`; `NoModel` naming `url` and what it lists otherwise."""
    try:
        page = await sdk.models.list()
    except openai.APIConnectionError as exc:
        raise NoModel(unreachable(url, exc.__cause__)) from exc
    except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
        raise NoModel(key_refused(url, exc.status_code)) from exc
    except openai.APIStatusError as exc:
        raise NoModel(f"no model is set and the LLM endpoint {url} lists none (/models answered HTTP {exc.status_code}): "
                      "set BUILDER_LLM_MODEL or --model to the model it serves") from exc
    ids = sorted({m.id for m in page.data})
    if len(ids) == 1:
        return ids[0]
    listed = ", ".join(ids[:MAX_LISTED]) + (f" and {len(ids) - MAX_LISTED} more" if len(ids) > MAX_LISTED else "")
    serves = f"serves {len(ids)} models ({listed})" if ids else "lists no model at /models"
    raise NoModel(f"no model is set and the LLM endpoint {url} {serves}: set BUILDER_LLM_MODEL or --model to the one to use")


def model_label(model: str) -> str:
    """A model's name as people read it (the dataset card, Label Studio): llama.cpp's `/v1/models` names the GGUF
    file it serves by its path, which says where the maintainer keeps it, not which model it is; its file name does."""
    return re.split(r"[\\/]", model)[-1] if model.lower().endswith(".gguf") else model
