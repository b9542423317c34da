"""The hidden checks of one assignment as a pytest suite, a pytest plug-in loaded by name:

    python -m pytest -p attnkit.pytest_suite autograder/A --submission NB.ipynb

from the course directory. Each ``test_<id>(results, plan)`` of the assignment's checks.py runs on what the
judge measured of the notebook. The plug-in is the kit's (it calls the engine), so the course's autograder/
holds no conftest.py and imports nothing of the kit but attnkit.toolkit (tests/test_layers.py).
"""
import pytest

from attnkit.engine.judge import run_submission


def pytest_collect_file(file_path, parent):
    """An assignment's checks.py is its suite (its checks are test_<id>(results, plan))."""
    if file_path.name == "checks.py":
        return pytest.Module.from_parent(parent, path=file_path)


def pytest_addoption(parser):
    parser.addoption("--submission", help="the notebook to judge")


@pytest.fixture(scope="module")
def _judged(request):
    path = request.config.getoption("--submission")
    if not path:
        pytest.fail("pass --submission NOTEBOOK.ipynb")
    results, plan, _, _ = run_submission(path, request.module.__name__.split(".")[-2])
    return results, plan


@pytest.fixture
def results(_judged):
    return _judged[0]


@pytest.fixture
def plan(_judged):
    return _judged[1]
