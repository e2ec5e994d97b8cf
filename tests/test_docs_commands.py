"""Doc tests: every command of the README's snippets, docs/cli.md and docs/sdk.md, run exactly as printed.

A page is read as a user reads it, top to bottom, and its code blocks are run in order in one shell (so an
``export`` or a ``cd`` carries over, as in a terminal), from a scratch directory that holds the repository's
top-level entries as symlinks (so ``examples/...`` and ``.venv/bin/...`` resolve, and nothing is written into
the checkout), with a home of its own (``~/.kubedl-py`` is the test's) and ``.venv/bin`` on ``PATH``, as
after ``make venv``. The rules, for whoever writes those pages:

- **What runs**: every fenced block whose language is ``sh`` or ``python``. Plain, ``yaml``, ``json`` and
  ``text`` blocks (output samples, files) are text; any other language is refused, so that no ``bash`` block
  escapes the test unnoticed.
- **sh, commands**: each line is a command (``\\`` continues it; ``#`` starts a comment) and must exit 0.
- **sh, a transcript**: a block with lines starting with ``$ `` is a terminal session: each ``$`` line is a
  command, the lines under it are what it prints (stdout and stderr together), compared exactly, except that
  ``...`` stands for any text; its exit status is free (show it with ``$ echo $?`` and its line).
- **python**: the block is a script run with the venv's ``python`` in that shell (its ``KUBECONFIG``); it must
  exit 0.
- **kubedl-py local up** (any path to it, any flags, a trailing ``&`` or not) is started in the background
  and waited for until it prints its ``export KUBECONFIG=`` line; it is stopped with Ctrl-C after the page
  (and must exit 0). A page that starts none (docs/sdk.md: "Everything below runs against the embedded
  cluster of the quick start") gets one before its first block, with ``KUBECONFIG`` exported as the page says.
- **Not run**: a block right under a line ``<!-- doctest: skip (why) -->`` (the reason is required):
  builds, registries, other clusters, anything minutes long or outside this machine; say where else it is
  tested. Any other command that does not end by itself must be skipped so.
- **Files a command needs** that a reader would have of their own (``team-a-job.yaml``) are given in a
  hidden comment anywhere on the page, written into the scratch directory before the first block::

      <!-- doctest-file: NAME
      ...the file's lines...
      -->

Runs against the embedded cluster (``local up``'s default) with its process runtime: the pages' jobs are
plain Python programs run for real. One cluster per page; about a minute in all.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.sdk.local_up import LocalUpProcess, user_env
from tests.tiers import EMBEDDED, require_tier

ROOT = Path(__file__).resolve().parents[1]
#: the pages whose commands are run
PAGES = ["README.md", "docs/cli.md", "docs/sdk.md"]
#: the longest one command may take (a job followed to its end)
COMMAND_SECONDS = 300.0

_FENCE = re.compile(r"^```(\w*)\s*$")
_SKIP = re.compile(r"^<!--\s*doctest:\s*skip\b\s*(.*?)\s*-->\s*$")
_FILE = re.compile(r"^<!--\s*doctest-file:\s*(\S+)\s*$")
_MARK = "\x1e"

pytestmark = pytest.mark.timeout(900)


@dataclass
class Command:
    """One command of a page: its text, where it is, and for a transcript what it must print."""

    text: str
    line: int
    expected: list[str] | None = None  # None: not a transcript; it must exit 0


@dataclass
class Block:
    language: str
    line: int
    lines: list[str]
    skip: str | None = None  # the reason, when marked


@dataclass
class Page:
    path: Path
    blocks: list[Block] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)


def parse_page(path: Path) -> Page:
    """The page's fenced blocks (with their skip markers) and hidden files."""
    page = Page(path)
    lines = path.read_text().splitlines()
    i = 0
    last_text = ""
    while i < len(lines):
        line = lines[i]
        hidden = _FILE.match(line)
        if hidden:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "-->"), None)
            assert end is not None, f"{path.name}:{i + 1}: doctest-file {hidden.group(1)} has no closing -->"
            page.files[hidden.group(1)] = "\n".join(lines[i + 1 : end]) + "\n"
            i = end + 1
            continue
        fence = _FENCE.match(line)
        if fence:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
            assert end is not None, f"{path.name}:{i + 1}: unclosed code block"
            skip = _SKIP.match(last_text)
            reason = skip.group(1).strip("() ") if skip else None
            if skip is not None:
                assert reason, f"{path.name}:{i}: a doctest skip marker must say why: <!-- doctest: skip (why) -->"
            page.blocks.append(Block(fence.group(1), i + 1, lines[i + 1 : end], reason))
            i = end + 1
            last_text = ""
            continue
        if line.strip():
            last_text = line.strip()
        i += 1
    return page


def commands_of(block: Block) -> list[Command]:
    """The commands of an ``sh`` block: one per line (``\\`` continues), or a transcript's ``$`` lines."""
    joined: list[tuple[int, str]] = []
    pending = ""
    for offset, raw in enumerate(block.lines):
        line = raw.rstrip()
        number = block.line + 1 + offset
        if pending:
            pending += "\n" + line
        else:
            start, pending = number, line
        if not line.endswith("\\"):
            joined.append((start, pending))
            pending = ""
    transcript = any(text.startswith("$ ") for _, text in joined)
    commands: list[Command] = []
    for number, text in joined:
        if transcript:
            if text.startswith("$ "):
                commands.append(Command(text[2:], number, []))
            else:
                assert commands, f"line {number}: a transcript's output comes under a $ command"
                assert commands[-1].expected is not None
                commands[-1].expected.append(text)
        elif text.strip() and not text.lstrip().startswith("#"):
            commands.append(Command(text, number))
    return commands


def is_local_up(command: str) -> list[str] | None:
    """The argv of a ``kubedl-py local up`` command (without a trailing ``&``), else None."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return None
    if words and words[-1] == "&":
        words = words[:-1]
    if len(words) >= 3 and Path(words[0]).name == "kubedl-py" and words[1:3] == ["local", "up"]:
        return words
    return None


def matches(expected: list[str], output: str) -> bool:
    """``output`` is ``expected`` (lines), with ``...`` standing for any text."""
    pattern = ".*?".join(re.escape(part) for part in "\n".join(expected).split("..."))
    return re.fullmatch(pattern, output.rstrip("\n"), re.DOTALL) is not None


class Shell:
    """One bash for the whole page, fed a command at a time; each answer is the command's output (stdout and
    stderr as a terminal shows them) and exit status."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd = cwd
        self.env = env
        self.process: asyncio.subprocess.Process | None = None
        self._buffer = ""

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            "bash",
            "--noprofile",
            "--norc",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=self.cwd,
            env=self.env,
            start_new_session=True,
        )

    async def run(self, command: str, timeout: float = COMMAND_SECONDS) -> tuple[int, str]:  # noqa: ASYNC109
        assert self.process is not None and self.process.stdin is not None and self.process.stdout is not None
        # stdin from /dev/null: a command that reads its input must not eat the next commands; the status is
        # printed after a separator and given back to $? for a following `echo $?`.
        script = (
            f"{{\n{command}\n}} </dev/null\n"
            f"__doctest_rc=$?; printf '{_MARK}%s{_MARK}\\n' \"$__doctest_rc\"; (exit $__doctest_rc)\n"
        )
        self.process.stdin.write(script.encode())
        await self.process.stdin.drain()
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(f"{_MARK}(\\d+){_MARK}\n", self._buffer)
            if found:
                output, self._buffer = self._buffer[: found.start()], self._buffer[found.end() :]
                return int(found.group(1)), output
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"still running after {timeout:.0f} s: {command}\n{self._buffer[-3000:]}")
            try:
                chunk = await asyncio.wait_for(self.process.stdout.read(65536), left)
            except TimeoutError:
                continue
            if not chunk:
                raise AssertionError(f"the shell ended during: {command}\n{self._buffer[-3000:]}")
            self._buffer += chunk.decode(errors="replace")

    async def stop(self) -> None:
        if self.process is None:
            return
        if self.process.returncode is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()


def scratch(tmp_path: Path, files: dict[str, str]) -> Path:
    """A directory that looks like the repository root to the pages' commands, plus the page's files."""
    where = tmp_path / "repo"
    where.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in (".git",):
            (where / entry.name).symlink_to(entry)
    for name, text in files.items():
        assert not (where / name).exists(), f"doctest-file {name} would hide the repository's {name}"
        (where / name).write_text(text)
    return where


@pytest.mark.parametrize("page_name", PAGES)
async def test_every_command_of_the_page_runs_as_printed(page_name: str, tmp_path: Path) -> None:
    require_tier(EMBEDDED)
    page = parse_page(ROOT / page_name)
    runnable = [block for block in page.blocks if block.language in ("sh", "python") and block.skip is None]
    assert runnable, f"{page_name} has no command to run"
    home = tmp_path / "home"
    home.mkdir()
    env = user_env(home)
    cwd = scratch(tmp_path, page.files)
    shell = Shell(cwd, env)
    clusters: list[LocalUpProcess] = []
    await shell.start()
    ran = 0
    try:
        own = any(
            is_local_up(command.text) for block in runnable if block.language == "sh" for command in commands_of(block)
        )
        if not own:  # the page runs against the quick start's cluster
            clusters.append(LocalUpProcess(env=env, cwd=cwd))
            await clusters[-1].start()
            await clusters[-1].ready()
            await shell.run("export KUBECONFIG=~/.kubedl-py/local.kubeconfig")
        for number, block in enumerate(runnable):
            where = f"{page_name}:{block.line}"
            if block.language == "python":
                script = cwd / f".doctest-{number}.py"
                script.write_text("\n".join(block.lines) + "\n")
                code, output = await shell.run(f"python {script.name}")
                assert code == 0, f"{where}: the Python block exited {code}:\n{output}"
                ran += 1
                continue
            for command in commands_of(block):
                where = f"{page_name}:{command.line}"
                argv = is_local_up(command.text)
                if argv is not None:
                    clusters.append(LocalUpProcess(argv=argv, env=env, cwd=cwd))
                    await clusters[-1].start()
                    await clusters[-1].ready()
                    ran += 1
                    continue
                code, output = await shell.run(command.text)
                if command.expected is None:
                    assert code == 0, f"{where}: `{command.text}` exited {code}:\n{output}"
                else:
                    assert matches(command.expected, output), (
                        f"{where}: `{command.text}` printed\n{output}\ninstead of\n" + "\n".join(command.expected)
                    )
                ran += 1
    finally:
        await shell.stop()
        codes = [await cluster.stop() for cluster in clusters]
    assert codes == [0] * len(clusters), f"local up exited {codes}"
    assert ran > 0


# ------------------------------------------------------------------------------ the rules themselves


def test_the_rules_read_blocks_markers_transcripts_and_files(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Intro.\n\n"
        "<!-- doctest: skip (needs a registry) -->\n```sh\ndocker push x\n```\n\n"
        "<!-- doctest-file: a.yaml\nkind: X\n-->\n"
        "```sh\nkubedl-py local up   # leave it running\nexport A=1 \\\n  B=2\n# a comment\n```\n\n"
        "```sh\n$ kubedl-py submit a.yaml\nkubedl-py: invalid ...\n$ echo $?\n2\n```\n\n"
        "```\nNAME   KIND\n```\n"
    )
    parsed = parse_page(page)
    assert parsed.files == {"a.yaml": "kind: X\n"}
    assert [(b.language, b.skip) for b in parsed.blocks] == [
        ("sh", "needs a registry"),
        ("sh", None),
        ("sh", None),
        ("", None),
    ]
    plain, transcript = commands_of(parsed.blocks[1]), commands_of(parsed.blocks[2])
    assert [c.text for c in plain] == ["kubedl-py local up   # leave it running", "export A=1 \\\n  B=2"]
    assert is_local_up(plain[0].text) == ["kubedl-py", "local", "up"]
    assert is_local_up(".venv/bin/kubedl-py local up --runtime process &") == [
        ".venv/bin/kubedl-py", "local", "up", "--runtime", "process"
    ]  # fmt: skip
    assert is_local_up("kubedl-py local down") is None
    assert [(c.text, c.expected) for c in transcript] == [
        ("kubedl-py submit a.yaml", ["kubedl-py: invalid ..."]),
        ("echo $?", ["2"]),
    ]
    assert matches(["kubedl-py: invalid ..."], "kubedl-py: invalid a.yaml: kind: 'X'\n")
    assert not matches(["2"], "3\n")


def test_a_skip_marker_must_say_why(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- doctest: skip -->\n```sh\nmake image\n```\n")
    with pytest.raises(AssertionError, match="must say why"):
        parse_page(page)


#: the languages of blocks that are text, not commands
TEXT_LANGUAGES = ("", "yaml", "json", "text")


def test_every_page_has_commands_and_no_block_escapes_the_rules() -> None:
    """A ```bash or ```console block would silently not run: the pages keep to sh (run) and text."""
    for name in PAGES:
        page = parse_page(ROOT / name)
        assert any(b.language in ("sh", "python") and b.skip is None for b in page.blocks), name
        odd = [
            f"{name}:{b.line} ```{b.language}"
            for b in page.blocks
            if b.language not in ("sh", "python", *TEXT_LANGUAGES)
        ]
        assert odd == [], f"write ```sh (run) or ``` (text) instead: {odd}"
