"""Endpoint, key and model from the environment, so OpenAI, Azure, vLLM or Ollama work by URL."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from builder.llm.endpoint import redact_url
from builder.paths import sample_dir

# The model the bundled recording's requests name (their keys hold it); its replies name `sample-recording`,
# which is what replayed calls record.
RECORDED_AS = "gpt-4o-2024-08-06"


class LLMSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt or renamed setting fails, rather than being ignored

    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str | None = None  # None: the endpoint's own (`builder.llm.served`), settled before the first request
    concurrency: int = Field(16, ge=1)  # at most; lowered for a server seen queueing (`builder.llm.pacing`)
    items_per_request: int = Field(10, ge=1)  # at most, for the stages that ask for several items at once
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(8, ge=0)
    max_reasks: int = Field(4, ge=0)
    backoff_base_s: float = Field(0.5, gt=0)
    backoff_max_s: float = Field(30.0, gt=0)
    temperature: float = 0.0
    source: Literal["api", "recording"] = "api"  # where replies come from: the endpoint, or the bundled recording
    offline: bool = False
    dry_run: bool = False
    batch: bool = False
    recording_path: str | None = None

    @property
    def endpoint(self) -> str:
        """The base URL as it may be shown and stored: any credentials in it hidden."""
        return redact_url(self.base_url)

    def __repr_args__(self):
        for name, value in super().__repr_args__():
            yield name, (self.endpoint if name == "base_url" and value else value)

    @classmethod
    def from_env(cls, **overrides) -> LLMSettings:
        """Live endpoint when OPENAI_API_KEY or OPENAI_BASE_URL is set; otherwise the bundled recording."""
        env = os.environ
        live = bool(env.get("OPENAI_API_KEY") or env.get("OPENAI_BASE_URL"))
        values: dict = {
            "base_url": env.get("OPENAI_BASE_URL") or None,
            "api_key": env.get("OPENAI_API_KEY") or ("not-needed" if live else None),
            "model": env.get("BUILDER_LLM_MODEL") or None,
            "source": "api" if live else "recording",
        }
        if not live:
            values["recording_path"] = str(sample_dir() / "demo" / "recording.jsonl")
        if env.get("BUILDER_LLM_CONCURRENCY"):
            values["concurrency"] = int(env["BUILDER_LLM_CONCURRENCY"])
        if env.get("BUILDER_LLM_TIMEOUT"):
            values["timeout_s"] = float(env["BUILDER_LLM_TIMEOUT"])
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
