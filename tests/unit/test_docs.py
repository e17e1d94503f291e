"""The README and docs/ tell the truth: the README's SpeculativeDeployment is the file in
examples/ it names, every `$ specdeploy` transcript in the README and docs/ runs and prints what
it shows, its `kubectl get` columns are the CRD's, and no command or file it mentions is gone.
The README stays a page a newcomer finishes (README_MAX_LINES)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from specdeploy import cli
from specdeploy.api.crd import PRINTER_COLUMNS

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250


def _blocks(language: str, text: str = README) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def _abridged(example: dict[str, Any], shown: dict[str, Any]) -> dict[str, Any]:
    """The example with each inline config the README shows as `{}` emptied the same way."""
    for part in ("target", "draft"):
        if shown["spec"].get(part, {}).get("config") == {}:
            example["spec"][part]["config"] = {}
    return example


def test_the_readme_example_is_the_example_file_it_names() -> None:
    """Each SpeculativeDeployment block is the examples/ file named last before it."""
    blocks = [b for b in _blocks("yaml") if "kind: SpeculativeDeployment" in b]
    assert blocks
    for block in blocks:
        before = README[:README.index(block)]
        named = re.findall(r"examples/[\w.-]+\.yaml", before)[-1]
        document = yaml.safe_load(block)
        (example,) = [d for d in yaml.safe_load_all((ROOT / named).read_text()) if d]
        assert _abridged(example, document) == document, f"README's example drifted from {named}"
        after = README[README.index(block) + len(block):]
        assert f"kubectl apply -f {named}" in after.split("```console", 1)[1].split("```", 1)[0]


def _commands() -> list[tuple[list[str], list[str]]]:
    """(argv, the output lines shown) for each `$ specdeploy ...` in the console blocks of the
    README and docs/."""
    found = []
    for block in (b for doc in DOCS for b in _blocks("console", doc.read_text())):
        lines = block.replace("\\\n", " ").splitlines()
        for index, line in enumerate(lines):
            if line.startswith("$ specdeploy "):
                shown = []
                for out in lines[index + 1:]:
                    if out.startswith("$ "):
                        break
                    shown.append(out.strip())
                found.append((shlex.split(line[2:])[1:], shown))
    return found


@pytest.mark.parametrize(("argv", "shown"), _commands(), ids=lambda v: " ".join(v)[:60] if v and v[0] != "" else "")
def test_each_readme_command_prints_what_the_readme_shows(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                                          argv: list[str], shown: list[str]) -> None:
    monkeypatch.chdir(ROOT)
    code = cli.main(argv)
    printed = [line.strip() for line in capsys.readouterr().out.splitlines()]
    failing = shown and (shown[0] == "INVALID" or shown[0].startswith("SpeculationEffective=False"))
    assert code == (1 if failing else 0)
    for line in shown:
        assert line in printed, f"README shows {line!r}; the command printed:\n" + "\n".join(printed)


def test_there_are_readme_commands() -> None:
    assert len(_commands()) >= 5 and any(argv[0] == "advise" for argv, _ in _commands())


def test_the_readme_is_a_page_a_newcomer_finishes() -> None:
    assert len(README.splitlines()) <= README_MAX_LINES
    for section in ("## The two commands", "## Getting the CLI", "## A real example", "## Install with Helm",
                    "## The custom resource", "## How this compares with vLLM's own checks"):
        assert section in README, section


def test_every_relative_link_in_the_docs_resolves() -> None:
    for doc in DOCS:
        for target in re.findall(r"\]\(([\w./-]+)(?:#[^)]*)?\)", doc.read_text()):
            assert (doc.parent / target).exists(), f"{doc.name} links to {target}, which does not exist"


def test_kubectl_get_shows_the_crds_columns() -> None:
    block = next(b for b in _blocks("console") if "kubectl get sdep" in b)
    header, row = block.splitlines()[2:4]
    columns = [c["name"].upper() for c in PRINTER_COLUMNS if not c.get("priority")]
    assert header.split() == ["NAME", *columns]
    values = dict(zip(header.split(), row.split()))
    types = {c["name"].upper(): c["type"] for c in PRINTER_COLUMNS}
    for name, value in values.items():
        if types.get(name) == "integer":
            assert value.isdigit(), f"{name} holds an integer, the README shows {value!r}"


@pytest.mark.parametrize("path", sorted(set(re.findall(r"examples/[\w.-]+\.yaml", README))))
def test_every_example_the_readme_names_exists_and_plans(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code = cli.main(["plan", "-f", str(ROOT / path), "-o", "json"])
    out, err = capsys.readouterr()
    configmap = re.search(r"configMapRef:\s*\n\s*name: (\S+)", (ROOT / path).read_text())
    if configmap:  # the README says to create it; without it the CLI says which one is missing
        assert code == 2 and configmap.group(1) in err and configmap.group(1) in README
    else:
        assert code == 0, out


def test_no_stale_commands_or_files() -> None:
    texts = {p: p.read_text() for p in [ROOT / "README.md", ROOT / "Makefile", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").glob("*.yaml")]}
    for path, text in texts.items():
        assert "huggingface-cli" not in text, f"{path.name}: the Hub CLI is `hf` now"
        for name in re.findall(r"\b([A-Z][A-Za-z_-]*\.md)\b", text):
            assert (ROOT / name).exists() or (ROOT / "docs" / name).exists() or name == "RESULTS.md", f"{path.name} cites {name}, which the repository does not have"


def test_readme_states_the_prerequisites_the_examples_need() -> None:
    for needed in ("hf-token", "hf-cache", "LeaderWorkerSet", "docker build", "llama-70b-eagle3-draft", "webhook.enabled"):
        assert needed in README, needed
