"""Every shell and Python block of the docs runs, as printed, the way its page says to run it.

A reader copies a block into a shell or a file; if the provider, the emulator or the block drifts,
this fails rather than the reader. Pages: README.md, docs/*.md and emulator/README.md, and the two
PyPI pages (PYPI.md, emulator/PYPI.md). Code blocks are ```` ```bash ```` or ```` ```python ````
(other shell or Python spellings are refused, so none can slip past); other languages (``text``,
``sql``, ``yaml``...) are not run.

The pages write commands as a reader with the project's virtualenv active types them (``airflow``,
``abm-emulator``, ``python``; never ``.venv/bin/...``): every block runs with the scratch folder's
``.venv/bin`` first on ``PATH`` and ``VIRTUAL_ENV`` set, as ``source .venv/bin/activate`` leaves a
shell. The PyPI pages also link nothing relative (PyPI cannot resolve it): every link is ``https://``.

The line above a block may say how it runs, as ``<!-- docs-test: KIND -->``; ``shell`` is the default
for bash and ``python`` for Python:

- ``shell``: ``bash -e -o pipefail`` in a scratch folder with ``.venv``, ``dags``, ``docker`` and
  ``scripts`` linked from the repository, a fresh emulator accepting the key ``my-key`` on
  127.0.0.1:8080 (storage 8081; other free ports, rewritten in the block, when those are taken) and
  a fresh ``AIRFLOW_HOME``; ``shell: NAME`` also checks what it printed with ``OUTPUT_CHECKS[NAME]``;
- ``server``: a command that serves until stopped: it must print ``ABM_EMULATOR_READY`` within 60 s;
- ``after-server``: a ``shell`` block run while the nearest ``server`` block above it on the page
  serves, instead of the fresh emulator (the server on the documented ports when they are free, else
  on free ones, rewritten in the block from its READY line); ``after-server: NAME`` also checks what
  it printed with ``OUTPUT_CHECKS[NAME]``;
- ``python``: a script (ports rewritten alike), with that emulator as the ``abm_default`` connection;
- ``dag``: a DAG file run with ``airflow dags test`` against the emulator and a DuckDB
  ``abm_warehouse``, on a copy of a metadata database ``airflow db migrate`` made once;
  ``dag-parse``: a DAG file that must import through Airflow's DagBag;
- ``pytest``: a test module, run by pytest with the ``abm-emulator`` plugin's fixtures (those of
  docs/emulator.md also on every Airflow ``make compat`` tests: tests/smoke/test_doc_examples.py,
  which holds the block reader both use);
- ``make``: the quick start: ``make demo`` is run; ``make test`` is what ``.ci/run`` runs (it is
  running this test, so it is checked there rather than started again);
- ``no-engine: REASON``: needs what a test machine cannot have (``docker``: no Docker engine;
  ``real-service``; ``package-index``: the published package; ``deployment``: a running Airflow with
  the DAG): syntax only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from abm_emulator.testing import RunningEmulator, start_emulator
from smoke.test_doc_examples import ROOT, Block, page_blocks, run_pytest_block

PYPI_PAGES = [ROOT / "PYPI.md", ROOT / "emulator" / "PYPI.md"]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "emulator" / "README.md",
    *PYPI_PAGES,
]
DOC_PORTS = (8080, 8081)
API_KEY = "my-key"
CODE = {
    "bash": {"shell", "server", "after-server", "make", "no-engine"},
    "python": {"python", "dag", "dag-parse", "pytest"},
}
#: Kinds whose ``: NAME`` is an output check.
CHECKED_KINDS = {"shell", "after-server"}
NOT_RUN = {"text", "sql", "yaml", "json", "toml", "ini", "csv"}
NO_ENGINE_REASONS = {"docker", "real-service", "package-index", "deployment"}


ALL_BLOCKS = [block for page in PAGES for block in page_blocks(page)]
CODE_BLOCKS = [block for block in ALL_BLOCKS if block.lang in CODE]


def test_every_block_says_its_language_and_code_is_bash_or_python() -> None:
    odd = [f"{b.where} ```{b.lang}" for b in ALL_BLOCKS if b.lang not in CODE and b.lang not in NOT_RUN]
    assert odd == [], "code blocks must be ```bash or ```python (or a data language that is not run)"


def test_every_code_block_runs_in_a_known_way() -> None:
    wrong = [f"{b.where}: {b.kind}" for b in CODE_BLOCKS if b.kind not in CODE[b.lang]]
    assert wrong == []
    no_engine = [b for b in CODE_BLOCKS if b.kind == "no-engine"]
    assert all(b.reason in NO_ENGINE_REASONS for b in no_engine), [(b.where, b.reason) for b in no_engine]
    checked = [b for b in CODE_BLOCKS if b.kind in CHECKED_KINDS and b.reason is not None]
    assert all(b.reason in OUTPUT_CHECKS for b in checked), [(b.where, b.reason) for b in checked]
    assert {b.reason for b in checked} == set(OUTPUT_CHECKS), "every output check has its block"
    assert {b.kind for b in CODE_BLOCKS} >= {"shell", "server", "after-server", "make", "dag", "pytest"}
    orphans = [b.where for b in CODE_BLOCKS if b.kind == "after-server" and _server_above(b) is None]
    assert orphans == [], "an after-server block needs a server block above it on its page"


_VENV_PATH = re.compile(r"\.venv/bin/(?!activate\b)")
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


def _without_comments(text: str) -> str:
    """The page with its HTML comments blanked, line numbers kept."""
    return _HTML_COMMENT.sub(lambda m: "\n" * m.group().count("\n"), text)


def test_commands_assume_an_active_venv() -> None:
    """``airflow ...``, not ``.venv/bin/airflow ...``: with the venv active or the packages installed
    with pip, the plain command is the one that works (generated comments may say otherwise)."""
    found = [
        f"{page.relative_to(ROOT)}:{number}: {line.strip()}"
        for page in PAGES
        for number, line in enumerate(_without_comments(page.read_text(encoding="utf-8")).splitlines(), 1)
        if _VENV_PATH.search(line)
    ]
    assert found == []


# Inline links and images, reference definitions, and HTML href/src attributes.
_LINK = re.compile(
    r"\]\(\s*<?([^)\s>]+)|^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)|\b(?:href|src)\s*=\s*[\"']([^\"']+)",
    re.MULTILINE,
)


def test_pypi_pages_link_only_to_absolute_https_urls() -> None:
    """PyPI shows these pages without the repository: a relative link there leads nowhere."""
    for page in PYPI_PAGES:
        text = page.read_text(encoding="utf-8")
        links = ["".join(groups) for groups in _LINK.findall(text)]
        assert all(link.startswith("https://") for link in links), (page.name, links)
        assert ".venv" not in text, f"{page.name} names the repository's .venv"


# -- the scratch folder and the emulator ---------------------------------------------------------------


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextmanager
def _doc_emulator() -> Iterator[RunningEmulator]:
    """The emulator the docs talk to: key ``my-key``, on the documented ports when they are free."""
    ports = dict(zip(("port", "storage_port"), DOC_PORTS, strict=True))
    if not all(_port_free(port) for port in DOC_PORTS):
        ports = {"port": 0, "storage_port": 0}
    with start_emulator(api_keys=[API_KEY], **ports) as emulator:
        yield emulator


def _as_printed(text: str, emulator: RunningEmulator) -> str:
    """The block, with the documented ports swapped for the emulator's when they differ."""
    return _on_urls(text, emulator.base_url, emulator.storage_url)


def _on_urls(text: str, base_url: str, storage_url: str) -> str:
    """The block, with the documented ports swapped for those of these two origins."""
    for documented, actual in zip(DOC_PORTS, (base_url, storage_url), strict=True):
        text = text.replace(f"127.0.0.1:{documented}", f"127.0.0.1:{actual.rsplit(':', 1)[1]}")
    return text


def _scratch(tmp_path: Path) -> Path:
    for name in (".venv", "dags", "docker", "scripts"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "airflow").mkdir()
    return tmp_path


def _env(scratch: Path, emulator: RunningEmulator | None = None, dags: Path | None = None) -> dict[str, str]:
    """The reader's shell: the venv active, no Airflow settings of this test run, a fresh Airflow home
    on SQLite."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    venv = scratch / ".venv"
    env.pop("PYTHONHOME", None)
    env.update(
        VIRTUAL_ENV=str(venv),
        PATH=os.pathsep.join([str(venv / "bin"), *[p for p in env.get("PATH", "").split(os.pathsep) if p]]),
        AIRFLOW_HOME=str(scratch / "airflow"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{scratch / 'airflow' / 'airflow.db'}",
        AIRFLOW__CORE__DAGS_FOLDER=str(dags or scratch / "airflow" / "dags"),
        AIRFLOW__ABM__STATE_DIR=str(scratch / "abm-state"),
    )
    if emulator is not None:
        env["AIRFLOW_CONN_ABM_DEFAULT"] = emulator.airflow_connection(API_KEY)
        env["AIRFLOW_CONN_ABM_WAREHOUSE"] = json.dumps(
            {"conn_type": "duckdb", "host": str(scratch / "warehouse.duckdb")}
        )
    return env


def _run(args: list[str], block: Block, cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (
        f"{block.where} failed ({done.returncode})\n--- stdout\n{done.stdout[-6000:]}\n"
        f"--- stderr\n{done.stderr[-6000:]}"
    )
    return done.stdout


# -- one runner per kind -------------------------------------------------------------------------------


def _curl_session(out: str, scratch: Path) -> None:
    """docs/emulator.md's curl session: each call answers what the comment beside it says."""
    assert '"addedAccounts":1' in out and '"accountsNotFound":[{"id":"not-an-account"' in out
    assert '"estimatedAccountsCount":"1"' in out
    assert '"schedule":"0 6 * * *"' in out
    lines = out.splitlines()
    assert "409" in lines
    assert '"status":"FAILED_PRECONDITION"' in out and '"field":"schedule"' in out
    assert "date,campaign_id,campaign_name,tactic_id,tactic_name,impressions,clicks,spend" in lines
    assert lines[-1] == "400"
    assert (scratch / "tactic_performance.csv").stat().st_size > 1000


def _export_dag_by_hand(out: str, scratch: Path) -> None:
    """docs/warehouse-loading.md's fast-clock run of abm_export_to_warehouse: one execution loaded."""
    import duckdb

    warehouse = scratch / ".state" / "try-export" / "warehouse.duckdb"
    with duckdb.connect(str(warehouse), read_only=True) as con:
        rows = con.execute("SELECT COUNT(*), COUNT(DISTINCT date) FROM abm_tactic_performance").fetchone()
        ledger = con.execute("SELECT execution_id, rows_loaded FROM abm_load_ledger").fetchall()
    assert rows is not None and rows[0] > 0 and rows[1] == 30, rows  # an export covers 30 days
    assert len(ledger) == 1 and ledger[0][1] == rows[0], ledger
    assert re.search(r"\b\d{4}-\d{2}-\d{2}\b.*\b\d+\b", out), out[-3000:]  # the query printed its days


#: ``<!-- docs-test: shell: NAME -->`` (or ``after-server: NAME``): what the block must print, or
#: leave behind in its scratch folder, beyond exiting 0.
OUTPUT_CHECKS = {"curl-session": _curl_session, "export-dag-by-hand": _export_dag_by_hand}


def _shell(block: Block, tmp_path: Path) -> None:
    scratch = _scratch(tmp_path)
    with _doc_emulator() as emulator:
        script = _as_printed(block.text, emulator)
        out = _run(["bash", "-e", "-o", "pipefail", "-c", script], block, scratch, _env(scratch))
    if block.reason is not None:
        OUTPUT_CHECKS[block.reason](out, scratch)


@contextmanager
def _serving(block: Block, scratch: Path) -> Iterator[dict[str, str]]:
    """Run a ``server`` block as printed until it says it is ready; yield its READY line's JSON.

    On free ports when the documented ones are taken; stopped (its whole process group) on the way out.
    """
    command = block.text.strip()
    assert "\n" not in command, f"{block.where}: a server block is one command"
    if not all(_port_free(port) for port in DOC_PORTS):
        command = command.split("#", 1)[0].rstrip() + " --port 0 --storage-port 0"
    process = subprocess.Popen(
        ["bash", "-c", f"exec {command}"],
        cwd=scratch,
        env=_env(scratch),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    # Reading blocks until the server prints; a timer ends it if it never does.
    give_up = threading.Timer(60, os.killpg, (process.pid, signal.SIGKILL))
    give_up.start()
    printed: list[str] = []
    drain: threading.Thread | None = None
    try:
        assert process.stdout is not None
        for line in process.stdout:
            printed.append(line)
            if line.startswith("ABM_EMULATOR_READY "):
                break
        give_up.cancel()
        ready = printed[-1] if printed else ""
        assert ready.startswith("ABM_EMULATOR_READY "), f"{block.where}: {''.join(printed)}"
        # Keep reading what it prints while it serves, so a full pipe never stalls it.
        drain = threading.Thread(target=printed.extend, args=(process.stdout,), daemon=True)
        drain.start()
        yield json.loads(ready.split(" ", 1)[1])
    finally:
        give_up.cancel()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
        if drain is not None:
            drain.join(10)


def _server(block: Block, tmp_path: Path) -> None:
    with _serving(block, _scratch(tmp_path)):
        pass


def _server_above(block: Block) -> Block | None:
    """The nearest ``server`` block above ``block`` on its page."""
    above = [b for b in CODE_BLOCKS if b.page == block.page and b.line < block.line and b.kind == "server"]
    return above[-1] if above else None


def _after_server(block: Block, tmp_path: Path) -> None:
    server = _server_above(block)
    assert server is not None, f"{block.where}: no server block above it"
    scratch = _scratch(tmp_path)
    with _serving(server, scratch) as ready:
        script = _on_urls(block.text, ready["base_url"], ready["storage_url"])
        out = _run(["bash", "-e", "-o", "pipefail", "-c", script], block, scratch, _env(scratch))
    if block.reason is not None:
        OUTPUT_CHECKS[block.reason](out, scratch)


def _python(block: Block, tmp_path: Path) -> None:
    scratch = _scratch(tmp_path)
    with _doc_emulator() as emulator:
        (scratch / "example.py").write_text(_as_printed(block.text, emulator))
        _run([sys.executable, "example.py"], block, scratch, _env(scratch, emulator))


def _dag_ids(block: Block, scratch: Path, env: dict[str, str]) -> list[str]:
    dags = Path(env["AIRFLOW__CORE__DAGS_FOLDER"])
    dags.mkdir(parents=True, exist_ok=True)
    (dags / f"docs_example_{block.line}.py").write_text(block.text)
    probe = (
        "import json, sys\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        "bag = DagBag(sys.argv[1])\n"
        "errors = {k: str(v) for k, v in bag.import_errors.items()}\n"
        "print(json.dumps({'errors': errors, 'ids': list(bag.dags)}))\n"
    )
    out = _run([sys.executable, "-c", probe, str(dags)], block, scratch, env)
    parsed = json.loads(out.strip().splitlines()[-1])
    assert parsed["errors"] == {}, f"{block.where}: {parsed['errors']}"
    assert parsed["ids"], f"{block.where} defines no DAG"
    return list(parsed["ids"])


def _dag_parse(block: Block, tmp_path: Path) -> None:
    scratch = _scratch(tmp_path)
    _dag_ids(block, scratch, _env(scratch, dags=scratch / "dags-docs"))


_MIGRATED: list[Path] = []


def _migrated_metadata_db(block: Block, tmp_path: Path) -> Path:
    """The metadata database ``airflow db migrate`` makes, migrated once (in the first ``dag`` block's
    temporary folder); each block runs on a copy of its own, so none sees another's runs."""
    if not _MIGRATED:
        home = tmp_path / "migrated-home"
        home.mkdir()
        env = {
            **_env(tmp_path),
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        }
        _run([str(Path(sys.executable).with_name("airflow")), "db", "migrate"], block, tmp_path, env)
        _MIGRATED.append(home / "airflow.db")
    return _MIGRATED[0]


def _dag(block: Block, tmp_path: Path) -> None:
    scratch = _scratch(tmp_path)
    with _doc_emulator() as emulator:
        env = _env(scratch, emulator, dags=scratch / "dags-docs")
        ids = _dag_ids(block, scratch, env)
        shutil.copyfile(_migrated_metadata_db(block, tmp_path), scratch / "airflow" / "airflow.db")
        airflow = str(Path(sys.executable).with_name("airflow"))
        for dag_id in ids:
            out = _run([airflow, "dags", "test", dag_id], block, scratch, env)
            assert "state=failed" not in out, f"{block.where}: {dag_id} failed\n{out[-4000:]}"
        assert emulator.requests_seen(), f"{block.where} never reached the emulator"


def _pytest(block: Block, tmp_path: Path) -> None:
    scratch = _scratch(tmp_path)
    run_pytest_block(block, scratch, _env(scratch))


def _make(block: Block, tmp_path: Path) -> None:
    commands = [line.split("#", 1)[0].strip() for line in block.text.splitlines() if line.strip()]
    assert commands, f"{block.where} is empty"
    for command in commands:
        if command == "make test":
            assert "make test" in (ROOT / ".ci" / "run").read_text(), (
                ".ci/run must run the README's test command"
            )
        elif command == "make demo":
            env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
            out = _run(["make", "demo"], block, ROOT, env, timeout=900)
            assert "abm_sync_members" in out and "abm_tactic_performance" in out, out[-3000:]
            assert "the watcher fired" in out and "loaded execution" in out, out[-3000:]
        else:
            pytest.fail(f"{block.where}: no runner for {command!r}")


def _no_engine(block: Block, tmp_path: Path) -> None:
    if block.lang == "bash":
        subprocess.run(["bash", "-n", "-c", block.text], check=True, timeout=30)
    else:
        compile(block.text, block.where, "exec")


RUNNERS = {
    "shell": _shell,
    "server": _server,
    "after-server": _after_server,
    "python": _python,
    "dag": _dag,
    "dag-parse": _dag_parse,
    "pytest": _pytest,
    "make": _make,
    "no-engine": _no_engine,
}


@pytest.mark.slow
@pytest.mark.parametrize("block", CODE_BLOCKS, ids=[f"{b.where}-{b.kind}" for b in CODE_BLOCKS])
def test_the_block_runs(block: Block, tmp_path: Path) -> None:
    RUNNERS[block.kind](block, tmp_path)
