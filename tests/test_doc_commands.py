"""Every `builder …` command in the code blocks of README.md and docs/*.md runs as written.

Each document's commands run in order, through the CLI as a user types them (`builder.cli.app`), in a
folder of its own that holds the demo workspace as `ws` (the bundled sample built by the real stages,
with release 0.1.0 in `ws/releases`, as `builder demo` leaves it; `BUILDER_WORKSPACE=ws`) and `data/`
as a clone's root has it. LLM requests go over HTTP to the stand-in server, which answers from the
sample's answer files; review commands reach a real Label Studio: the workspace's own where the
document runs `builder review serve`, else an existing one (`LABEL_STUDIO_URL`), as a team shares it.

A command that cannot run here says so in the document, with the reason, and is skipped with it:
`<!-- example: REASON -->` on the line before a fenced block marks the whole block, and a comment line
`# example: REASON` directly above a command marks that command (with its continuation lines). A
command whose comment says it `exits N when …` (a release gate that fails) may exit N, never with an error.
A `builder` command in an indented code block fails the test: fence it, so that it is run.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sample_workspace import build_sample_workspace
from typer.testing import CliRunner

from annotation import server as ls_server
from builder.cli import app
from builder.demo import DEMO_VERSION
from builder.demo_recording import demo_lexicon
from builder.paths import data_dir
from builder.releases.publish import PublishRequest, publish
from builder.testing.standin import StandinServer
from builder.workspace.store import open_workspace

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)")
SHELL = {"", "bash", "sh", "shell", "console", "zsh"}
BLOCK_MARK = re.compile(r"^\s*<!--\s*example:\s*(.+?)\s*-->\s*$")
LINE_MARK = re.compile(r"^\s*#\s*example:\s*(.+?)\s*$")
MAY_EXIT = re.compile(r"\bexits? (\d+) when\b")
ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
SEPARATORS = {"&&", ";", "||"}


@dataclass(frozen=True)
class DocCommand:
    doc: str  # the document, relative to the repository
    line: int  # where the command starts
    argv: tuple[str, ...]  # after `builder`
    env: tuple[tuple[str, str], ...] = ()  # VAR=value before it, and `export`s above it in the document
    skip: str | None = None  # why it cannot run here, as the document says
    may_exit: int | None = None  # a non-zero exit the document announces

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    def __str__(self) -> str:
        return f"{self.where}: builder {shlex.join(self.argv)}"


@dataclass
class _Block:
    skip: str | None  # the reason of an `<!-- example: … -->` before it
    shell: bool  # a block of another language (python, yaml) holds no commands
    lines: list[tuple[int, str]] = field(default_factory=list)


def _comment(line: str) -> tuple[str, str]:
    """(the code, the comment) of a shell line: a `#` that begins a word outside quotes begins the comment."""
    quote, prev = None, " "
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and prev.isspace():
            return line[:i], line[i + 1:]
        prev = ch
    return line, ""


def _blocks(text: str) -> tuple[list[_Block], list[int]]:
    """The fenced shell blocks of a Markdown document, each line with its number; and the lines outside them
    that an indented code block would show as a `builder` command."""
    blocks, indented, block, fence, before = [], [], None, None, ""
    for number, line in enumerate(text.splitlines(), 1):
        if block is None:
            if m := FENCE.match(line):
                mark = BLOCK_MARK.match(before)
                fence, block = m.group(1), _Block(mark.group(1) if mark else None, m.group(2).lower() in SHELL)
            elif re.match(r"^( {4,}|\t)builder ", line):
                indented.append(number)
            if line.strip():
                before = line
            continue
        if line.strip().startswith(fence[0] * len(fence)) and not line.strip().strip(fence[0]):
            if block.shell:
                blocks.append(block)
            block, before = None, ""
        else:
            block.lines.append((number, line))
    return blocks, indented


def doc_commands(path: Path, root: Path = ROOT) -> list[DocCommand]:
    """The `builder` commands of a document's fenced shell blocks, in order, with their markers."""
    doc = str(path.relative_to(root))
    commands: list[DocCommand] = []
    exported: dict[str, str] = {}
    for block in _blocks(path.read_text(encoding="utf-8"))[0]:
        pending, logical, start = None, "", 0
        for number, line in block.lines:
            if not logical:
                start = number
                if m := LINE_MARK.match(line):
                    pending = m.group(1)
                    continue
            code, comment = _comment(line)
            if code.rstrip().endswith("\\"):  # continued on the next line
                logical += code.rstrip()[:-1] + " "
                continue
            logical += code
            skip, pending = block.skip or pending, None
            commands += _commands(logical, doc, start, comment, skip, exported)
            logical = ""
    return commands


def _commands(code: str, doc: str, line: int, comment: str, skip: str | None, exported: dict[str, str]) -> list[DocCommand]:
    lexer = shlex.shlex(code, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split, lexer.commenters = True, ""
    try:
        tokens, segments = list(lexer), [[]]
    except ValueError as exc:  # prose in an unlabelled block (a diagram) need not parse as shell; a command must
        if re.search(r"(^|&&|;|\|\|)\s*([A-Za-z_]\w*=\S*\s+)*builder\s", code):
            raise AssertionError(f"{doc}:{line}: {exc}") from None
        return []
    for token in tokens:
        if token in SEPARATORS:
            segments.append([])
        else:
            segments[-1].append(token)
    may_exit = int(m.group(1)) if (m := MAY_EXIT.search(comment)) else None
    found = []
    for seg in segments:
        if seg[:1] == ["export"] and not skip:
            exported.update(ASSIGNMENT.match(a).groups() for a in seg[1:] if ASSIGNMENT.match(a))
            continue
        env = dict(exported)
        while seg and ASSIGNMENT.match(seg[0]):
            env.update([ASSIGNMENT.match(seg.pop(0)).groups()])
        if seg[:1] == ["builder"]:
            found.append(DocCommand(doc, line, tuple(seg[1:]), tuple(env.items()), skip, may_exit))
    return found


COMMANDS = [c for path in DOCUMENTS for c in doc_commands(path)]


# -- the extraction itself ---------------------------------------------------------------------------------------


def test_commands_are_read_from_fenced_shell_blocks_with_their_markers(tmp_path):
    doc = tmp_path / "guide.md"
    doc.write_text("""Intro `builder inline --not-a-block`.

```bash
export BUILDER_WORKSPACE=ws        # or -w
builder init ws
builder translate --lang hu,tr \\
    --dry-run                      # a comment # with a hash
builder review push --lang hu && builder review pull   # two commands
# example: needs a GPU
builder eval run --device cuda \\
    --out results/
OPENAI_API_KEY=sk-… builder eval run --endpoint http://x/v1 --model "a b"
builder language add sw --meta-prompt 'Ni kipi {property}? #1' --name "Swahili"
builder eval gate results/         # a table; exits 1 when a gate fails
make demo
```

```python
builder.releases.load("ws/releases", "1.0.0", "de")
```

<!-- example: needs the Hub -->
~~~sh
builder publish --hub ORG/NAME
~~~
""", encoding="utf-8")
    got = [(c.line, c.argv, dict(c.env), c.skip, c.may_exit) for c in doc_commands(doc, tmp_path)]
    ws = {"BUILDER_WORKSPACE": "ws"}
    assert got == [
        (5, ("init", "ws"), ws, None, None),
        (6, ("translate", "--lang", "hu,tr", "--dry-run"), ws, None, None),
        (8, ("review", "push", "--lang", "hu"), ws, None, None),
        (8, ("review", "pull"), ws, None, None),
        (10, ("eval", "run", "--device", "cuda", "--out", "results/"), ws, "needs a GPU", None),
        (12, ("eval", "run", "--endpoint", "http://x/v1", "--model", "a b"), {**ws, "OPENAI_API_KEY": "sk-…"}, None, None),
        (13, ("language", "add", "sw", "--meta-prompt", "Ni kipi {property}? #1", "--name", "Swahili"), ws, None, None),
        (14, ("eval", "gate", "results/"), ws, None, 1),
        (24, ("publish", "--hub", "ORG/NAME"), ws, "needs the Hub", None),
    ]
    assert _blocks("Run:\n\n    builder status\n\n```\n    builder init ws\n```\n")[1] == [3]


@pytest.mark.parametrize("path", DOCUMENTS, ids=[p.name for p in DOCUMENTS])
def test_no_command_hides_in_an_indented_code_block(path):
    assert not _blocks(path.read_text(encoding="utf-8"))[1], f"{path.name}: fence these lines (```bash) so that they are run"


def test_the_documents_have_commands_to_run():
    assert {c.doc for c in COMMANDS} >= {"README.md", "docs/curators.md", "docs/maintainers.md", "docs/evaluation.md",
                                          "docs/adding-a-language.md"}
    assert sum(c.skip is None for c in COMMANDS) > 30


# -- running them ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_template(tmp_path_factory) -> Path:
    """The demo workspace, once: the sample through translation, acceptance, generation and audits, and release 0.1.0."""
    directory = build_sample_workspace(tmp_path_factory.mktemp("doc-demo") / "ws")
    ws = open_workspace(directory)
    try:
        publish(ws, PublishRequest(target=directory / "releases", version=DEMO_VERSION, notes="the demo's release"))
    finally:
        ws.close()
    return directory


@pytest.fixture(scope="module")
def llm_server():
    with StandinServer(demo_lexicon()) as server:
        yield server


@pytest.fixture(scope="module")
def worlds(tmp_path_factory, demo_template, llm_server, request):
    """Each document's folder and environment, made when its first command runs; Label Studio stopped at the end."""
    made: dict[str, tuple[Path, dict[str, str]]] = {}

    def world(doc: str) -> tuple[Path, dict[str, str]]:
        if doc not in made:
            root = tmp_path_factory.mktemp(re.sub(r"\W", "-", doc))
            shutil.copytree(demo_template, root / "ws")
            (root / "data").symlink_to(data_dir())
            env = {"BUILDER_WORKSPACE": "ws", "OPENAI_BASE_URL": llm_server.base_url, "OPENAI_API_KEY": "doc-commands"}
            review = [c.argv[:2] for c in COMMANDS if c.doc == doc and c.argv[:1] == ("review",) and not c.skip]
            if review and ("review", "serve") not in review:
                conn = request.getfixturevalue("label_studio")
                env |= {"LABEL_STUDIO_URL": conn.url, "LABEL_STUDIO_API_KEY": conn.token}
            made[doc] = root, env
        return made[doc]

    yield world
    for root, _ in made.values():
        ls_server.stop(root / "ws", log=lambda *a: None)


@pytest.mark.parametrize("command", COMMANDS, ids=[f"{c.where} {' '.join(c.argv[:2])}" for c in COMMANDS])
def test_documented_command_runs_as_written(command: DocCommand, worlds, monkeypatch):
    if command.skip:
        pytest.skip(f"{command}: {command.skip}")
    root, env = worlds(command.doc)
    monkeypatch.chdir(root)
    result = CliRunner().invoke(app, list(command.argv), env={**env, **dict(command.env)}, catch_exceptions=False)
    allowed = {0} if command.may_exit is None else {0, command.may_exit}
    assert result.exit_code in allowed, f"{command}\nexit {result.exit_code}:\n{result.output}"
    assert result.exit_code == 0 or "error:" not in result.output, f"{command}\n{result.output}"
