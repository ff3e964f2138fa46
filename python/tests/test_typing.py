"""The installed package is what is tested, and its types hold: every Python example of
the READMEs passes ``mypy --strict`` against the installed wheel's stubs (before, ``with
Stash(...) as s: s.stats()`` was an error, since ``__enter__`` was typed as returning the
extension's class, and ``from objstash import BadKeyError`` failed under ``--strict``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig

import objstash

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
READMES = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "python", "README.md")]


def test_the_package_under_test_is_the_installed_wheel():
    site = os.path.realpath(sysconfig.get_paths()["purelib"])
    assert os.path.realpath(objstash.__file__).startswith(site), objstash.__file__


def examples() -> list[tuple[str, str]]:
    found = []
    for readme in READMES:
        text = open(readme, encoding="utf-8").read()
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", text, re.S)):
            found.append((f"{os.path.basename(os.path.dirname(readme))}_{i}", block))
    return found


def test_the_readme_examples_pass_mypy_strict(tmp_path):
    blocks = examples()
    assert len(blocks) >= 3, "the READMEs lost their Python examples"
    files = []
    for name, code in blocks:
        path = tmp_path / f"example_{re.sub(r'[^a-z0-9_]', '_', name.lower())}.py"
        path.write_text(code)
        files.append(str(path))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--config-file",
            os.path.join(ROOT, "python", "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "cache"),
            *files,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
