"""The documentation as tests read it: README.md and docs/*.md, a section by its heading,
the fenced blocks of a section. One place, so a page or a section that moves is one edit
here, never a slice of README.md by hand in each test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$", re.M)
FENCE = re.compile(r"^```[^\n]*\n.*?^```", re.M | re.S)


def pages() -> list[Path]:
    """Every page of the documentation: the README, then docs/ in name order."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def page(name: str) -> str:
    """The text of one page, by its path from the repository root (``docs/spark.md``)."""
    return (REPO / name).read_text()


def all_text() -> str:
    """Every page's text, for facts that must be documented somewhere."""
    return "\n".join(p.read_text() for p in pages())


def headings(text: str) -> list[tuple[int, str, int]]:
    """(level, title, offset) of each heading outside fenced blocks."""
    fenced = [m.span() for m in FENCE.finditer(text)]
    return [(len(m.group(1)), m.group(2), m.start()) for m in HEADING.finditer(text)
            if not any(a <= m.start() < b for a, b in fenced)]


def section(name: str, title: str) -> str:
    """The section of page ``name`` under the heading ``title``, up to the next heading of
    its level or above (its subsections included)."""
    text = page(name)
    found = headings(text)
    matches = [(level, offset) for level, t, offset in found if t == title]
    assert len(matches) == 1, f"{name} has {len(matches)} sections titled {title!r}"
    level, start = matches[0]
    ends = [offset for lvl, _, offset in found if offset > start and lvl <= level]
    return text[start:ends[0] if ends else len(text)]


def blocks(text: str, language: str) -> list[str]:
    """The contents of the fenced blocks of ``text`` opened with ```` ```language ````."""
    return re.findall(rf"^```{re.escape(language)}\n(.*?)^```", text, re.M | re.S)


def anchor(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings, repeated titles numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    out = set()
    for _, title, _ in headings(text):
        slug = anchor(title)
        out.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return out


# -- shell examples: commands and the output a page shows under them -----------------------
#
# A page's ```sh block is read as steps: a run of command lines, then the ``# ...`` lines
# under it, which are the output. An output line continued on the next is indented one
# space (``#  "next": ...``); ``...`` stands for what the page trimmed; three spaces end
# the output and start a remark (``# [0]   <- not visible yet``). Values that differ from
# run to run (the cluster id, times, producer ids in JSON) are compared by name only.

#: JSON fields whose values depend on the run, not on what the example does
VARYING = re.compile(r'"(cluster_id|timestamp|transaction_start_ms|producer_id)":("[^"]*"|-?\d+)')
REMARK = re.compile(r"\s{3,}\S.*$")


def shell_steps(text: str) -> list[tuple[str, str]]:
    """(commands, output shown) of every step of ``text``'s ```sh blocks, in order."""
    found: list[tuple[str, str]] = []
    for block in FENCE.finditer(text):
        opening, *body = block.group(0).splitlines()[:-1]
        if opening != "```sh":
            continue
        commands: list[str] = []
        output: list[str] = []
        for line in [*body, ""]:
            if line.startswith("#") and commands:
                output.append(line)
                continue
            if output or (not line.strip() and commands):
                found.append(("\n".join(commands), _shown(output)))
                commands, output = [], []
            if line.strip():
                commands.append(line)
    return found


def _shown(lines: list[str]) -> str:
    """The output ``# `` lines show: continuation lines joined, remarks cut."""
    text = ""
    for line in lines:
        if line.startswith("#  ") and line[3:4] not in (" ", ""):
            text += REMARK.sub("", line[3:])
        else:
            text += ("\n" if text else "") + REMARK.sub("", line[2:])
    return text


def shows(actual: str, shown: str) -> bool:
    """Whether ``actual`` is the output the page shows, ``...`` matching anything."""
    pattern = ".*".join(re.escape(part) for part in VARYING.sub(r'"\1":_', shown).split("..."))
    return re.fullmatch(pattern, VARYING.sub(r'"\1":_', actual).strip(), re.S) is not None


def run_shell_steps(found: list[tuple[str, str]], env: dict[str, str], replace: dict[str, str],
                    cwd: Path = REPO) -> list[str]:
    """Run the steps in one bash in ``cwd`` (the repository root, where ``.venv/bin/`` is), in
    order, as a reader pastes them (``$?`` is still the last command's status at the next
    step), each occurrence of a key of ``replace`` replaced by its value; the output of
    each step."""
    marker = f"--step-{uuid.uuid4().hex}--"
    script = "set -u\n" + "".join(f"{commands}\n__status=$?; echo; echo {marker}; (exit $__status)\n"
                                  for commands, _ in found)
    for documented, actual in replace.items():
        script = script.replace(documented, actual)
    done = subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={"PATH": os.defpath, "HOME": os.environ.get("HOME", "/"), **env})
    assert done.returncode == 0, done.stderr
    return [out.strip("\n") for out in done.stdout.split(marker + "\n")[:-1]]


def wrong_outputs(found: list[tuple[str, str]], outputs: list[str]) -> list[str]:
    """Each step whose output is not what the page shows, as a readable difference."""
    return [f"$ {commands}\nshown:   {shown}\nprinted: {actual}"
            for (commands, shown), actual in zip(found, outputs) if shown and not shows(actual, shown)]


def run_readme_example(bootstrap: str) -> str:
    """The README's confluent-kafka example, as its reader runs it, against ``bootstrap``;
    what it prints."""
    (code,) = blocks(section("README.md", "What it is for"), "python")
    done = subprocess.run([sys.executable, "-c", code.replace("127.0.0.1:9092", bootstrap)],
                          capture_output=True, text=True, timeout=150, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
