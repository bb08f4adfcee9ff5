"""Prompt templates from data/prompts/, rendered for a language."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import yaml

from builder.llm.client import prompt_hash
from builder.paths import data_dir


@dataclass(frozen=True)
class Prompt:
    name: str
    system: str
    user: str

    @property
    def hash(self) -> str:
        return prompt_hash(self.system, self.user)


@cache
def load(name: str) -> Prompt:
    raw = yaml.safe_load((data_dir() / "prompts" / f"{name}.yaml").read_text(encoding="utf-8"))
    return Prompt(name, raw.get("system", "").strip(), raw["user"].strip())
