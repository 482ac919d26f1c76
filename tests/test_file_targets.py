"""Files are written only where a user means, and read only when they are files.

An export, a report, an sbatch script or an MLPerf log goes into a new or a regular file:
a device, a FIFO or (unless asked) a symlink is refused with one line, and left as it was.
``--db`` is a trainperf store, an empty file or SQLite database, or absent: a foreign SQLite
file, a special file or a broken link is refused by every verb, as one line and exit 2,
with nothing written. Nothing ever opens a FIFO to find out what it is: the tests that give
one run in a process of their own, killed after ``TIMEOUT_S`` (or, where only Python code
could open it, under an alarm), so that a regression fails instead of hanging the suite.
"""

import hashlib
import os
import signal
import sqlite3
import stat
import subprocess
import sys

import pytest

from trainperf.convergence.mllog import MLPerfLogger
from trainperf.core import strict_json
from trainperf.core.fileio import FileKindError
from trainperf.store import exchange
from trainperf.store.access import StoreError
from trainperf.store.checks import check_writable
from trainperf.store.database import Store

TIMEOUT_S = 20

# A --db that no verb may use, and what the one line says of it.
BAD_DBS = {
    "symlink to /dev/null": "is a character device, not a regular file",
    "dangling symlink": "is a dangling symlink (to ",
    "foreign with results": "an SQLite database but not a trainperf store (it has tables: results)",
    "foreign with foo": "an SQLite database but not a trainperf store (it has tables: foo)",
    "user_version 999": "schema version 999, newer than this trainperf",
    "user_version -1": "not a trainperf store (it has no tables; user_version -1)",
    "user_version 1 without tables": "damaged or not a trainperf store",
}
WRITERS = [
    ["run", "--model", "cifarnet", "--batch-size", "2", "--device", "cpu"],
    ["import", "EXPORT"],
    ["micro", "gemm"],
    ["maxbatch", "cifarnet"],
]
READERS = [
    ["results"],
    ["scaling"],
    ["pareto"],
    ["compare"],
    ["report", "--out", "OUT"],
    ["export", "OUT.json"],
    ["isoaccuracy", "1", "2"],
]


def make_bad_db(directory, name):
    """The database ``name`` of ``BAD_DBS``, made in ``directory``; its path."""
    path = directory / "bad.db"
    if name == "symlink to /dev/null":
        path.symlink_to("/dev/null")
    elif name == "dangling symlink":
        path.symlink_to(directory / "nowhere.db")
    else:
        db = sqlite3.connect(path)
        if name.startswith("foreign"):
            table = name.split()[-1]
            db.execute(f"CREATE TABLE {table} (x)")
            db.execute(f"INSERT INTO {table} VALUES ('theirs')")
        else:
            db.execute(f"PRAGMA user_version = {name.split()[1]}")
        db.commit()
        db.close()
    return path


def snapshot(directory):
    """What each entry of ``directory`` is: a regular file's hash, a link's target, else
    its type. Found with lstat: nothing here opens a FIFO."""
    state = {}
    for path in sorted(directory.iterdir()):
        mode = os.lstat(path).st_mode
        if stat.S_ISREG(mode):
            state[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif stat.S_ISLNK(mode):
            state[path.name] = "-> " + os.readlink(path)
        else:
            state[path.name] = stat.S_IFMT(mode)
    return state


def assert_one_line(code, out, err, *words):
    assert code == 2 and out == "", err
    assert err.startswith("trainperf: error: ") and err.count("\n") == 1, err
    for word in words:
        assert word in err, err


@pytest.fixture(scope="module")
def export_file(tmp_path_factory):
    """A small export: one system and nothing else."""
    path = tmp_path_factory.mktemp("export") / "small.json"
    with Store(":memory:") as store:
        store.add_system({"fingerprint": "f00d", "hostname": "elsewhere"})
        document = exchange.export_document(store, None)
    path.write_text(strict_json.dumps(document))
    return path


@pytest.fixture
def deadline():
    """Fail instead of hanging when code in this process opens a FIFO."""

    def expired(signum, frame):
        raise TimeoutError(f"blocked for {TIMEOUT_S} s: something opened a FIFO")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(TIMEOUT_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def trainperf_process(args, cwd):
    """Run the command in a session of its own, killed with its children after
    ``TIMEOUT_S``: (exit code, stdout, stderr), or a failed test when it blocked."""
    command = [sys.executable, "-m", "trainperf", *map(str, args)]
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"trainperf {' '.join(map(str, args))} blocked for {TIMEOUT_S} s")
    return proc.returncode, out, err


# --- --db: every verb refuses what is not a store, as one line ------------------------


@pytest.mark.parametrize("bad", BAD_DBS)
@pytest.mark.parametrize("verb", WRITERS + READERS, ids=lambda args: args[0])
def test_a_db_that_is_not_a_store_is_refused_by_every_verb_and_left_as_it_was(
    tmp_path, run_cli, export_file, bad, verb
):
    data = tmp_path / "data"
    data.mkdir()
    db = make_bad_db(data, bad)
    args = [
        {"EXPORT": export_file, "OUT": tmp_path / "report", "OUT.json": tmp_path / "x.json"}.get(
            a, a
        )
        for a in verb
    ]
    before = snapshot(data)
    code, out, err = run_cli([*args, "--db", db])
    assert_one_line(code, out, err, f"--db {db}", BAD_DBS[bad])
    assert snapshot(data) == before  # not a byte changed, no -wal, no -shm beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]  # no report, no export


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--model", "cifarnet", "--batch-size", "2", "--device", "cpu"],
        ["import", "EXPORT"],
        ["micro", "gemm"],
        ["results"],
        ["report", "--out", "OUT"],
        ["export", "OUT.json"],
    ],
    ids=lambda args: args[0],
)
def test_a_fifo_as_db_is_refused_without_opening_it(tmp_path, export_file, args):
    fifo = tmp_path / "db.fifo"
    os.mkfifo(fifo)
    args = [{"EXPORT": export_file}.get(a, a) for a in args]
    code, out, err = trainperf_process([*args, "--db", fifo], tmp_path)
    assert_one_line(code, out, err, f"--db {fifo}: is a FIFO, not a regular file")
    assert os.listdir(tmp_path) == ["db.fifo"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_store_and_check_writable_refuse_a_fifo_without_opening_it(tmp_path, deadline):
    fifo = tmp_path / "db.fifo"
    os.mkfifo(fifo)
    with pytest.raises(StoreError, match="is a FIFO, not a regular file"):
        check_writable(fifo)
    with pytest.raises(StoreError, match="is a FIFO"):
        Store(fifo)
    with pytest.raises(StoreError, match="is a FIFO"):
        Store.copy_of(fifo)


@pytest.mark.parametrize("bad", [b for b in BAD_DBS if "symlink" not in b])
def test_the_store_never_adds_its_tables_to_a_database_not_its_own(tmp_path, bad):
    db = make_bad_db(tmp_path, bad)
    before = snapshot(tmp_path)
    with pytest.raises(StoreError, match="trainperf"):
        Store(db)
    with pytest.raises(StoreError, match="trainperf"):
        Store.copy_of(db)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("empty", ["0 bytes", "an empty SQLite database"])
def test_an_empty_db_is_made_a_store(tmp_path, run_cli, export_file, empty):
    db = tmp_path / "new.db"
    if empty == "0 bytes":
        db.write_bytes(b"")
    else:
        sqlite3.connect(db).close()  # user_version 0, no tables
    code, _, err = run_cli(["import", export_file, "--db", db])
    assert code == 0, err
    code, out, err = run_cli(["results", "--db", db, "--json"])
    assert code == 0 and strict_json.loads(out)["results"] == [], err


def test_a_symlink_to_a_store_is_the_store(tmp_path, run_cli, report_db, export_file):
    target = tmp_path / "real" / "r.db"
    target.parent.mkdir()
    target.write_bytes(report_db.read_bytes())
    link = tmp_path / "link.db"
    link.symlink_to(target)
    code, out, err = run_cli(["import", export_file, "--db", link, "--json"])
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(target)
    with Store(target) as store:  # open: its -wal holds what it writes, not yet checkpointed
        store.add_system({"fingerprint": "late", "hostname": "late"})
        # The reader finds the writer's -wal beside the file the link points to.
        with Store.copy_of(link) as reader:
            fingerprints = {s["fingerprint"] for s in reader.systems()}
    assert {"f00d", "late"} <= fingerprints


# --- files to read: stat first, never open a FIFO or a device -------------------------


def test_import_of_a_device_says_what_it_is(tmp_path, run_cli):
    code, out, err = run_cli(["import", "/dev/null", "--db", tmp_path / "r.db"])
    assert_one_line(code, out, err, "/dev/null: is a character device, not a regular file")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("verb", ["import", "compare"])
def test_a_fifo_to_read_is_refused_without_opening_it(tmp_path, run_cli, report_db, deadline, verb):
    fifo = tmp_path / "in.json"
    os.mkfifo(fifo)
    args = ["import", fifo, "--db", tmp_path / "r.db"]
    code, out, err = run_cli(args if verb == "import" else ["compare", fifo, report_db])
    assert_one_line(code, out, err, f"{fifo}: is a FIFO, not a regular file")
    assert os.listdir(tmp_path) == ["in.json"]


def test_calibrate_refuses_a_fifo_without_opening_it(tmp_path):
    fifo = tmp_path / "r.db"
    os.mkfifo(fifo)
    args = ["predict", "--model", "cifarnet", "--devices", "1", "--calibrate", fifo]
    code, out, err = trainperf_process(args, tmp_path)
    assert_one_line(code, out, err, f"{fifo} as a results database: is a FIFO")


# --- files to write: new or regular, never a device, FIFO or unasked symlink ----------


def test_export_into_a_fifo_leaves_the_fifo(tmp_path, report_db):
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    code, out, err = trainperf_process(["export", fifo, "--db", report_db], tmp_path)
    assert_one_line(code, out, err, f"{fifo}: is a FIFO, not a regular file")
    assert os.listdir(tmp_path) == ["out.json"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_export_through_a_symlink_only_when_asked(tmp_path, run_cli, report_db):
    target, link = tmp_path / "real.json", tmp_path / "link.json"
    target.write_text("old")
    link.symlink_to(target)
    code, out, err = run_cli(["export", link, "--db", report_db])
    assert_one_line(code, out, err, f"{link}: is a symlink (to {target})", "--follow-symlinks")
    assert target.read_text() == "old" and link.is_symlink()
    code, out, err = run_cli(["export", link, "--db", report_db, "--follow-symlinks"])
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert strict_json.loads(target.read_text())["format"] == "trainperf-results"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


@pytest.mark.parametrize("format_", [[], ["--format", "json"], ["--format", "csv"]])
def test_export_to_dash_is_refused_not_written_as_a_file_named_dash(
    tmp_path, run_cli, report_db, monkeypatch, format_
):
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    code, out, err = run_cli(["export", "-", "--db", report_db, *format_])
    assert_one_line(code, out, err, "give FILE a name, not '-'")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("follow", [[], ["--follow-symlinks"]])
def test_export_never_replaces_a_device_or_a_dangling_link(tmp_path, run_cli, report_db, follow):
    device, dangling = tmp_path / "null.json", tmp_path / "dangling.json"
    device.symlink_to("/dev/null")
    dangling.symlink_to(tmp_path / "nowhere.json")
    before = snapshot(tmp_path)
    code, out, err = run_cli(["export", device, "--db", report_db, *follow])
    assert_one_line(code, out, err, str(device), "/dev/null")
    code, out, err = run_cli(["export", dangling, "--db", report_db, *follow])
    assert_one_line(code, out, err, f"{dangling}: is a dangling symlink")
    assert snapshot(tmp_path) == before
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_report_writes_index_html_only_as_a_regular_file(tmp_path, run_cli, report_db, kind):
    out = tmp_path / "report"
    out.mkdir()
    index = out / "index.html"
    if kind == "fifo":
        os.mkfifo(index)
    else:
        (tmp_path / "elsewhere.html").write_text("theirs")
        index.symlink_to(tmp_path / "elsewhere.html")
    before = snapshot(out)
    code, stdout, err = run_cli(["report", "--db", report_db, "--out", out])
    assert_one_line(code, stdout, err, f"--out {index}: is a")
    assert snapshot(out) == before


def test_report_makes_its_directory_only_in_one_that_exists_and_not_through_a_link(
    tmp_path, run_cli, report_db
):
    """As export, slurm and --mllog refuse a missing parent; a linked directory would put
    the pages where the user did not name."""
    missing = tmp_path / "no" / "such" / "report"
    code, out, err = run_cli(["report", "--db", report_db, "--out", missing])
    assert_one_line(code, out, err, f"--out {missing}: directory {missing.parent} does not")
    assert not (tmp_path / "no").exists()
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    code, out, err = run_cli(["report", "--db", report_db, "--out", tmp_path / "link"])
    assert_one_line(code, out, err, f"--out {tmp_path / 'link'} is a symlink (to ")
    assert list((tmp_path / "real").iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [["report", "--out", ""], ["report", "--db", ""], ["export", ""], ["import", ""]],
    ids=" ".join,
)
def test_an_empty_path_is_refused_not_taken_for_the_current_directory(
    tmp_path, run_cli, monkeypatch, report_db, args
):
    monkeypatch.chdir(tmp_path)
    if "--db" not in args:
        args = [*args, "--db", report_db]
    code, out, err = run_cli(args)
    assert_one_line(code, out, err, "is empty: give a path")
    assert list(tmp_path.iterdir()) == []


def test_slurm_script_into_a_fifo_or_a_symlink_is_refused(tmp_path, run_cli, monkeypatch, deadline):
    monkeypatch.chdir(tmp_path)
    fifo = tmp_path / "trainperf-short-test.sbatch"  # the default --out
    os.mkfifo(fifo)
    code, out, err = run_cli(["slurm", "short-test"])
    assert_one_line(code, out, err, f"--out {fifo.name}: is a FIFO, not a regular file")
    (tmp_path / "theirs.sh").write_text("echo theirs\n")
    (tmp_path / "job.sbatch").symlink_to(tmp_path / "theirs.sh")
    code, out, err = run_cli(["slurm", "short-test", "--out", tmp_path / "job.sbatch"])
    assert_one_line(code, out, err, "job.sbatch: is a symlink")
    assert (tmp_path / "theirs.sh").read_text() == "echo theirs\n"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and (tmp_path / "job.sbatch").is_symlink()


TRAIN = ["train", "cifarnet", "--target", "top1=0.5", "--data", "jpeg-sample", "--runs", "2"]


def test_train_refuses_an_mllog_into_a_fifo_before_it_starts(tmp_path):
    fifo = tmp_path / "log.run2.txt"  # the second run's log
    os.mkfifo(fifo)
    args = [*TRAIN, "--mllog", tmp_path / "log.txt", "--db", tmp_path / "t.db"]
    code, out, err = trainperf_process(args, tmp_path)
    assert_one_line(code, out, err, f"--mllog {fifo}: is a FIFO, not a regular file")
    assert os.listdir(tmp_path) == ["log.run2.txt"]  # no database, no first log


def test_train_refuses_an_mllog_that_is_a_symlink(tmp_path, run_cli):
    (tmp_path / "theirs.txt").write_text("theirs")
    (tmp_path / "log.run1.txt").symlink_to(tmp_path / "theirs.txt")
    args = [*TRAIN, "--mllog", tmp_path / "log.txt", "--db", tmp_path / "t.db"]
    code, out, err = run_cli(args)
    assert_one_line(code, out, err, "--mllog", "log.run1.txt: is a symlink")
    assert sorted(os.listdir(tmp_path)) == ["log.run1.txt", "theirs.txt"]


def test_the_mlperf_logger_itself_refuses_a_fifo(tmp_path, deadline):
    fifo = tmp_path / "run.mllog"
    os.mkfifo(fifo)
    with pytest.raises(FileKindError, match="is a FIFO"):
        MLPerfLogger(fifo, "cifarnet", system_name="here")


def test_a_suite_file_that_is_a_fifo_is_refused_without_opening_it(tmp_path, run_cli, deadline):
    fifo = tmp_path / "grid.yaml"
    os.mkfifo(fifo)
    code, out, err = run_cli(["run", fifo, "--db", tmp_path / "r.db"])
    assert_one_line(code, out, err, f"suite file {fifo}: is a FIFO, not a regular file")
    assert os.listdir(tmp_path) == ["grid.yaml"]
