"""One `code_version()` for releases and evaluation results, in PEP 440 form."""

import subprocess

from packaging.version import Version

import builder
from builder.version import code_version


def _git(folder, *args):
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)


def test_the_version_names_the_commit_and_local_edits(tmp_path):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    assert code_version(checkout) == builder.__version__  # not a git checkout: the package version alone
    _git(checkout, "init", "-q")
    (checkout / "a.py").write_text("x = 1\n")
    _git(checkout, "add", "a.py")
    _git(checkout, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q", "-m", "one")
    sha = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    clean = code_version(checkout)
    assert clean == f"{builder.__version__}+g{sha[:12]}"
    (checkout / "b.py").write_text("untracked\n")
    assert code_version(checkout) == clean  # untracked files are not edits of the code
    (checkout / "a.py").write_text("x = 2\n")
    dirty = code_version(checkout)
    assert dirty == clean + ".dirty"
    assert Version(clean).local == f"g{sha[:12]}" and Version(dirty).local == f"g{sha[:12]}.dirty"


def test_a_folder_inside_another_repository_is_not_described_by_its_commit(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "site-packages").mkdir()
    assert code_version(tmp_path / "site-packages") == builder.__version__
