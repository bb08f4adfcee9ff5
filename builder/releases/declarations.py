"""The languages a release carries: each released language's declaration as it was when published.

`publish` writes the declarations into the manifest (`languages`) and the card, so a language
declared only in a workspace keeps its name, typology and prompts wherever the release goes, and
evaluation reads them from the release it evaluates. A release published before manifests carried
languages is read with the built-in registry for its codes, and the result says so.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from builder.errors import BuilderError
from builder.languages import builtin_languages
from builder.records import Language
from builder.releases.features import M2C_PREFIX

MANIFEST_FIELD = "languages"


class UndeclaredLanguageError(BuilderError, ValueError):
    pass


class ReleaseLanguages(BaseModel):
    """A release's languages, in code order; `note` says why they are not the release's own declarations."""

    model_config = ConfigDict(frozen=True)
    languages: tuple[Language, ...]
    note: str | None = None

    def by_code(self) -> dict[str, Language]:
        return {lang.code: lang for lang in self.languages}


def config_language(config: str) -> str:
    """The language code of a config (`de`, `m2c_de`)."""
    return config.removeprefix(M2C_PREFIX)


def released(known: dict[str, Language], codes: list[str]) -> list[Language]:
    """The declarations of `codes` from a registry (built-in and workspace languages), to be published."""
    missing = [c for c in codes if c not in known]
    if missing:
        raise UndeclaredLanguageError(f"no declaration for language(s) {', '.join(missing)} "
                                      "(declare them with `builder language add`)")
    return [known[c] for c in sorted(codes)]


def to_manifest(languages: list[Language]) -> list[dict]:
    return [lang.model_dump() for lang in languages]


def from_manifest(manifest: dict) -> ReleaseLanguages:
    """The declarations a manifest holds; for an older manifest without them, the built-in ones of its codes."""
    if MANIFEST_FIELD in manifest:
        return ReleaseLanguages(languages=tuple(Language.model_validate(d) for d in manifest[MANIFEST_FIELD]))
    codes = sorted({config_language(c) for c in manifest["configs"]})
    builtin = {lang.code: lang for lang in builtin_languages()}
    unknown = [c for c in codes if c not in builtin]
    note = (f"release {manifest.get('version', '?')} was published before releases carried their languages: "
            f"{', '.join(c for c in codes if c in builtin) or 'none'} are described by the built-in registry"
            + (f"; {', '.join(unknown)} by nothing (no name, typology or prompt)" if unknown else ""))
    return ReleaseLanguages(languages=tuple(builtin[c] for c in codes if c in builtin), note=note)
