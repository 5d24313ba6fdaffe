"""The documentation stays a front door that tells the truth.

- README.md stays short (the rest lives in docs/);
- no Markdown or Python file cites the design notes of the project workspace (the
  folder beside the project root, or the design file there): the project's own docs are docs/*.md and
  proofs/*.md;
- every relative link (and image) in README.md and docs/*.md points to a file that exists,
  and every ``#anchor`` into a Markdown file to one of its headings;
- the README's install and test commands are the ones .ci/run executes;
- the README's worked example prints what the README says it prints.
"""
from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from remat_theory.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_README_LINES = 260

FENCE = re.compile(r"^```.*?^```[ \t]*$", re.M | re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_NOTES = "DES" + "IGN"  # spelled apart so that this file does not cite what it forbids
STALE_CITATION = re.compile(r"(?<![\w-])" + "sha" + r"red/|" + _NOTES + r"\.md|" + _NOTES + r" section|"
                            + _NOTES + "'s")


def _markdown_files():
    """Every Markdown file of the project, outside hidden folders (.git, virtual
    environments), build outputs and benchmarks/results (recorded outputs)."""
    skip_parts = {"node_modules", "build", "dist", "site-packages"}
    for p in sorted(ROOT.rglob("*.md")):
        rel = p.relative_to(ROOT)
        parts = rel.parts
        if any(part.startswith(".") or part in skip_parts or part.endswith(".egg-info")
               for part in parts[:-1]):
            continue
        if parts[:2] == ("benchmarks", "results"):
            continue
        yield p


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M):
        base = _slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def _section(text: str, title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"README.md has no '## {title}' section"
    return m.group(1)


def _first_block(section: str, lang: str) -> list[str]:
    m = re.search(rf"^```{lang}\s*$(.*?)^```", section, re.M | re.S)
    assert m, f"no ```{lang} block"
    return [line for line in m.group(1).splitlines() if line.strip()]


def _commands(lines) -> list[str]:
    """Shell command lines without trailing comments, comment-only lines dropped."""
    out = []
    for line in lines:
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def _ci_block(marker: str) -> list[str]:
    """The commands .ci/run runs under its comment ``# README, "<marker>":``."""
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    start = [i for i, line in enumerate(lines) if line.strip() == f'# README, "{marker}":']
    assert len(start) == 1, f".ci/run has no single '# README, \"{marker}\":' comment"
    block = []
    for line in lines[start[0] + 1:]:
        if line.strip().startswith("# README,"):
            break
        block.append(line)
    return _commands(block)


def test_readme_is_short():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_README_LINES, (
        f"README.md has {n} lines (at most {MAX_README_LINES}): move details to docs/")


def test_no_file_cites_the_design_notes():
    py = sorted(p for top in ("remat_theory", "solvers", "tests", "benchmarks")
                for p in (ROOT / top).rglob("*.py"))
    bad = []
    for p in list(_markdown_files()) + py:
        for k, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            if STALE_CITATION.search(line):
                bad.append(f"{p.relative_to(ROOT)}:{k}: {line.strip()}")
    assert not bad, "cite docs/*.md or proofs/*.md instead:\n" + "\n".join(bad)


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    text = FENCE.sub("", doc.read_text(encoding="utf-8"))
    targets = LINK.findall(text)
    assert targets or doc.name != "README.md", f"{doc} has no links at all"
    broken = []
    for target in targets:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        dest = doc if not path_part else (doc.parent / path_part).resolve()
        if not dest.exists():
            broken.append(f"{target}: no such file")
            continue
        if anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.name}")
    assert not broken, f"{doc.relative_to(ROOT)}:\n" + "\n".join(broken)


def test_readme_install_and_test_commands_are_what_ci_runs():
    text = README.read_text(encoding="utf-8")
    install = _commands(_first_block(_section(text, "Install"), "bash"))
    assert install and re.match(r"python3? -m venv \S+ && \. \S+/bin/activate$", install[0]), (
        f"the README's install block should start by creating a virtual environment: {install}")
    assert install[1:] == _ci_block("Install"), (
        f"README install commands {install[1:]} differ from .ci/run's {_ci_block('Install')}")
    test = _commands(_first_block(_section(text, "Test"), "bash"))
    assert test == _ci_block("Test")


def _console_examples():
    """(command, expected output) for every ``$ remat ...`` line of the README's
    ```console blocks."""
    text = README.read_text(encoding="utf-8")
    examples = []
    for block in re.findall(r"^```console\s*$(.*?)^```", text, re.M | re.S):
        cmd, out = None, []
        for line in block.strip("\n").splitlines():
            if line.startswith("$ "):
                if cmd:
                    examples.append((cmd, out))
                cmd, out = line[2:], []
            else:
                out.append(line)
        if cmd:
            examples.append((cmd, out))
    return examples


def _mask_timing(lines):
    return [re.sub(r"^solve time \S+ s$", "solve time <t> s", line.rstrip()) for line in lines]


@pytest.mark.parametrize("cmd,expected", _console_examples(), ids=lambda v: v if isinstance(v, str) else "")
def test_readme_console_examples_print_what_the_readme_shows(cmd, expected, monkeypatch, capsys):
    argv = shlex.split(cmd)
    assert argv[0] == "remat"
    monkeypatch.chdir(ROOT)
    main(argv[1:])
    out, err = capsys.readouterr()
    assert _mask_timing((out + err).splitlines()) == _mask_timing(expected)


def test_readme_python_example_prints_what_its_comments_say(monkeypatch):
    text = README.read_text(encoding="utf-8")
    code = "\n".join(_first_block(_section(text, "Worked example"), "python"))
    expected = [m.group(1).strip() for m in re.finditer(r"^print\(.*#\s*(.*)$", code, re.M)]
    assert expected, "the README's Python example states no expected output"
    monkeypatch.chdir(ROOT)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "README.md", "exec"), {})
    assert buf.getvalue().splitlines() == expected
