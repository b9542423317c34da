"""A dishonest Dask worker that hands back pickles: nothing of it runs where the course, the key or the gradebook is.

The worker (a real `dask worker` with ``--preload`` of a module this test writes) judges honestly, but for each
victim's submission returns the result wrapped in one of Dask's pickle-carrying forms, passed through the
scheduler unchanged: a ``__Pickled__`` frame (``ToPickle(Pickled(...))``), ``__Serialized__`` headers naming
pickle and cloudpickle (``Serialized``), and ``Serialize`` of a pickled object. Unpickled where the Dask client
lives, each would write a marker and copy the course's grading key. The run must leave neither, report each
victim not graded in one sentence, and grade the honest student in the same run normally.
"""
import os
import re

from attnkit import autograde
from tests.test_autograde import A, _args, _class
from tests.test_dask_cluster import Cluster, _finished

WRAPPINGS = ["ToPickle(Pickled)", "ToPickle(Serialized pickle)", "ToPickle(Serialized cloudpickle)",
             "ToPickle(Serialize(Pickled))"]

PRELOAD = '''
import os, pickle
import distributed.worker
from distributed.protocol.serialize import Pickled, Serialize, Serialized, ToPickle
import attnkit.autograde.cluster as cluster

MARK, KEY, COPY, LOG = (os.environ[k] for k in ("EVIL_MARK", "EVIL_KEY", "EVIL_COPY", "EVIL_LOG"))


class Payload:
    def __reduce__(self):            # runs wherever it is unpickled
        return (os.system, (f"echo $$ >> {MARK}; cat {KEY} > {COPY}",))


PAYLOAD = pickle.dumps(Payload())
WRAP = [
    lambda: ToPickle(Pickled({"pickled-obj": PAYLOAD}, [])),
    lambda: ToPickle(Serialized({"serializer": "pickle"}, [PAYLOAD])),
    lambda: ToPickle(Serialized({"serializer": "cloudpickle"}, [PAYLOAD])),
    lambda: ToPickle(Serialize(Pickled({"pickled-obj": PAYLOAD}, []))),
]
honest = getattr(cluster, "honest_judge_submission", cluster.judge_submission)    # dask may import this twice
cluster.honest_judge_submission = honest


def dishonest(payload):
    result = honest(payload)                              # judged honestly...
    text = b"".join(payload["notebooks"].values())
    for i, wrap in enumerate(WRAP):
        if f"EVIL-VICTIM-{i}-".encode() in text:
            with open(LOG, "a") as f:
                f.write(f"{i}\\n")
            return wrap()                                 # ...and handed back as a pickle
    return result


cluster.judge_submission = dishonest
# the worker's own sending, its to change: results go out as they are, not wrapped in Serialize
distributed.worker.to_serialize = lambda value: value


def dask_setup(worker):
    pass
'''


def _victims(course, n: int) -> list[str]:
    """Copies of a correct submission, each with a comment naming the wrapping it will come back in."""
    src = (course / "submitted" / "ada" / A / f"{A}.ipynb").read_text()
    names = []
    for i in range(n):
        name = f"x-victim{i}"
        (course / "submitted" / name / A).mkdir(parents=True)
        marked = src.replace('"cells": [', '"cells": [{"cell_type": "markdown", "metadata": {}, "source": '
                             f'"EVIL-VICTIM-{i}-"}}, ', 1)
        assert marked != src
        (course / "submitted" / name / A / f"{A}.ipynb").write_text(marked)
        names.append(name)
    return names


def test_a_dishonest_workers_pickles_never_run_where_the_key_is(released, tmp_path, capsys):
    honest = _class(released, keep=["ada"])
    victims = _victims(released, len(WRAPPINGS))
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "evil_preload.py").write_text(PRELOAD)
    mark, copy, log = tmp_path / "unpickled-by", tmp_path / "stolen-key", evil / "wrapped"
    key = released / ".attnkit" / "grading-key"          # the tests' key is in the environment: a file to steal too
    key.parent.mkdir(exist_ok=True)
    key.write_text(os.environ["ATTNKIT_GRADING_KEY"])
    (tmp_path / "dask").mkdir()
    c = Cluster(tmp_path / "dask", workers=1, worker_args=("--preload", str(evil / "evil_preload.py")),
                worker_env={"EVIL_MARK": str(mark), "EVIL_KEY": str(key), "EVIL_COPY": str(copy),
                            "EVIL_LOG": str(log), "PYTHONPATH": str(evil)})
    try:
        capsys.readouterr()
        code = autograde.main(_args(released, "--scheduler", c.address))
        err = capsys.readouterr().err
    finally:
        c.close()
    assert sorted(int(i) for i in log.read_text().split()) == list(range(len(WRAPPINGS))), err   # each form sent
    assert not mark.exists(), f"a pickle from the worker ran in pid(s) {mark.read_text().split()}"
    assert not copy.exists(), "the grading key was copied"
    assert code == 1, err
    assert sorted(_finished(err)) == sorted(honest + victims), err
    for v in victims:
        line = next(line for line in err.splitlines() if f"] {v}: " in line)
        assert ": FAILED (" in line, line
        logs = list(released.rglob(f"{v}.log"))
        assert len(logs) == 1, logs
        text = logs[0].read_text().strip()
        assert "\n" not in text and len(re.findall(r"[.!?](\s|$)", text)) <= 1 and text, text   # one sentence
        assert not (released / autograde.STATE_DIR / A / f"{v}.json").exists()      # no marker: not graded
    for h in honest:
        assert re.search(rf"\] {h}: 20/20 ", err), err
        assert (released / autograde.STATE_DIR / A / f"{h}.json").exists()
